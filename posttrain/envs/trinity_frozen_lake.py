"""`trinity_frozen_lake`: Trinity-RFT's FrozenLake workflow as a text environment.

Trinity-RFT's ``frozen_lake_workflow`` (trinity/common/workflows/envs/frozen_lake) plays one lake per
taskset row, whose ``seed``, ``size`` and ``p`` columns draw the map. This environment plays the same
episodes turn for turn, so a Trinity config translates onto posttrain's agent loop:

- **Map**: the seed's generator (gymnasium's seeding) draws every cell frozen with probability ``p``
  (else a hole), then start and goal cells until they differ (the board is kept), and redraws the
  whole map until a depth-first search from the start meets the goal within ``env_max_steps`` moves.
  That search is Trinity's: cells are visited once, in stack order (down, right, up, left pushed),
  so it can reject a map whose shortest path is short enough. The ``frozen_lake`` env's ROLL layout
  draws the same first map for a seed but checks reachability by breadth-first search, unbounded.
- **Dynamics**: gymnasium's ``FrozenLakeEnv`` (goal 1.0 and done, hole 0.0 and done, slips on
  ``is_slippery`` ice), reset with the row's seed.
- **Observations**: Trinity's user turns: ``Current Observation (k):``, the map one row per line (each
  cell `` P \\t``: ``P`` player, ``_`` ice, ``O`` hole, ``G`` goal, ``X`` player in a hole, ``√`` on the
  goal), the reminder that the goal is not reached, a notice after an action that left the map as it
  was (an invalid action, a wall, a slip in place), and the actions left of ``agent_max_steps``.
- **Actions**: the text of the last ```` ``` ```` block of the reply, any case: ``Left``, ``Down``,
  ``Right``, ``Up`` or their numbers 1-4. Anything else is invalid: the player stays, reward 0, the
  episode goes on (``action_is_valid`` False; Trinity adds no penalty, and the env manager's
  format_penalty defaults to 0).

``agent_max_steps`` is the custom_envs entry's ``max_steps`` too (the loop cuts the episode there);
here it only counts down in the observation.

>>> lake = TrinityFrozenLake(size=3, p=0.8)
>>> print(lake.reset(seed=0).replace(chr(9), "|"))  # each cell ends in a tab
Current Observation (0): 
 _ | _ | G |
 _ | O | P |
 _ | _ | _ |
You have not achieved the goal, P has not reached G yet. Please give the next action.
The maximum number of steps remaining is 10.
>>> lake.step("I go up: ```Up```")[1:]
(1.0, True, {'action_is_valid': True, 'success': True})
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.envs.registry import register_env

# Trinity-RFT's system prompt for this workflow (its utils.SYSTEM_PROMPT), word for word: the policy
# it trains reads exactly this.
SYSTEM_PROMPT = """You are Qwen, created by Alibaba Cloud. You are a helpful assistant. You are walking on a frozen lake.

FrozenLake Quick Guide
Goal: Reach the goal (G). Player (P) and Goal (G) must overlap.

Symbols:
_ Frozen | O Hole | G Goal | P Player

Rules:
1. Avoid falling into holes (O).
2. Frozen tiles are slippery, you may move perpendicular to your intended direction.

Valid Action (separated by | ):
Up | Down | Left | Right

Rewards:
Fall into hole: 0
Reach goal: +1.0

You will be provided the current observation, please decide on the next Action.
You should show your thought process and then input the final action in ``` ```.
You should only output the NEXT ACTION at each interation in the ``` ```. For example, if you want to move up, you should output ```Up```.
You should plan ahead and need to achieve it in minimum number of steps.
You should be aware that frozen tiles can be slippery, but the chance is small and you should not overthink it.

Please show your thinking process and put the final action in ``` ```. In every turn, the final action MUST be one of Up, Down, Left, Right.
"""
NOT_YET = "You have not achieved the goal, P has not reached G yet. Please give the next action."
UNCHANGED = ("\nYour last response is invalid. Your position didn't change at all. You may need to recheck your thinking "
             "process, action outputted, and the format of response. Remember, you should only output the NEXT ACTION at "
             "each interation in the ``` ```. For example, if you want to move up, you should output ```Up```.")
# the reply's word (or number) -> gymnasium's action id
ACTIONS = {"left": 0, "down": 1, "right": 2, "up": 3, "1": 0, "2": 1, "3": 2, "4": 3}
CELLS = {b"F": " _ \t", b"S": " _ \t", b"H": " O \t", b"G": " G \t"}
PLAYER = {b"H": " X \t", b"G": " √ \t"}  # the player's cell by what lies under it; else " P \t"
_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)


def goal_within(board: list[list[str]], max_steps: int) -> bool:
    """Trinity's validity check: a depth-first search from S over non-hole cells meets G with at most
    ``max_steps`` moves counted along the search's own path (each cell is expanded once, the first
    time it is popped, so a later, shorter path to it is not tried).

    >>> board = [list("SF"), list("HG")]  # two moves from S to G
    >>> goal_within(board, 2), goal_within(board, 1), goal_within(board, 0)
    (True, True, False)
    """
    size = len(board)
    start = next((r, c) for r in range(size) for c in range(size) if board[r][c] == "S")
    stack, seen = [(start[0], start[1], 0)], set()
    while stack:
        r, c, steps = stack.pop()
        if steps > max_steps or (r, c) in seen:
            continue
        seen.add((r, c))
        for dr, dc in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            nr, nc = r + dr, c + dc
            if not (0 <= nr < size and 0 <= nc < size):
                continue
            if board[nr][nc] == "G":  # found on expansion: one move beyond `steps` still counts
                return True
            if board[nr][nc] != "H":
                stack.append((nr, nc, steps + 1))
    return False


def trinity_map(size: int, p: float, seed: int, max_steps: int) -> list[str]:
    """The map Trinity-RFT's generator draws for a taskset row (see the module docstring).

    >>> trinity_map(3, 0.8, seed=0, max_steps=8)
    ['FFG', 'FHS', 'FFF']
    """
    from gymnasium.utils import seeding

    rng, _ = seeding.np_random(seed)
    p = min(1.0, p)
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p]).tolist()
        while True:  # only the two cells are redrawn until they differ
            start = int(rng.integers(0, size)), int(rng.integers(0, size))
            goal = int(rng.integers(0, size)), int(rng.integers(0, size))
            if start != goal:
                break
        board[start[0]][start[1]], board[goal[0]][goal[1]] = "S", "G"
        if goal_within(board, max_steps):
            return ["".join(row) for row in board]


def parse_action(text: str, actions: dict[str, int] = ACTIONS) -> int | None:
    """Gymnasium's action id named by the reply's last ```` ``` ```` block (lower-cased, looked up in
    `actions`), or None.

    >>> parse_action("Left is a hole, so ```left``` no: ```Down```"), parse_action("```4```"), parse_action("Up")
    (1, 3, None)
    """
    blocks = _BLOCK.findall(text)
    return actions.get(blocks[-1].strip().lower()) if blocks else None


def turn_text(step: int, board: str, unchanged: bool, agent_max_steps: int, notice: str = UNCHANGED) -> str:
    """The user turn of move `step` (from 0): the map, the not-yet line, `notice` when the map is as
    it was before the previous move, and the moves left of `agent_max_steps`."""
    text = f"Current Observation ({step}): \n{board}\n{NOT_YET}" + (notice if unchanged else "")
    left = agent_max_steps - step
    return text + (f"\nThe maximum number of steps remaining is {left}." if left > 0 else "")


@register_env("trinity_frozen_lake")
class TrinityFrozenLake:
    """Trinity-RFT's FrozenLake workflow, one lake per seed (see the module docstring)."""

    instruction = SYSTEM_PROMPT

    def __init__(self, size: int = 4, p: float = 0.8, is_slippery: bool = False, env_max_steps: int = 8,
                 agent_max_steps: int = 10):
        if not 2 <= size <= 16:
            raise ValueError(f"size must be between 2 and 16 (a map needs two cells for start and goal), got {size}")
        if not 0.0 < p:
            raise ValueError(f"p (the chance a cell is frozen) must be > 0, got {p}")
        for name, value in (("env_max_steps", env_max_steps), ("agent_max_steps", agent_max_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        try:
            import gymnasium  # noqa: F401  (the lake's dynamics)
        except ImportError:
            raise ValueError("trinity_frozen_lake steps gymnasium's FrozenLake: pip install 'posttrain[envs]' (or gymnasium)") from None
        self.size, self.p, self.is_slippery = size, float(p), bool(is_slippery)
        self.env_max_steps, self.agent_max_steps = env_max_steps, agent_max_steps
        self.lake: Any = None
        self.steps = 0

    def reset(self, seed: int) -> str:
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

        self.lake = FrozenLakeEnv(desc=trinity_map(self.size, self.p, seed, self.env_max_steps), is_slippery=self.is_slippery)
        self.lake.reset(seed=seed)  # the slips' generator, as Trinity resets with the row's seed
        self.steps = 0
        return turn_text(self.steps, self.render(), False, self.agent_max_steps)

    def render(self) -> str:
        r0, c0 = divmod(int(self.lake.s), self.size)
        return "\n".join("".join(PLAYER.get(cell, " P \t") if (r, c) == (r0, c0) else CELLS[cell] for c, cell in enumerate(row))
                         for r, row in enumerate(self.lake.desc.tolist()))

    def state(self) -> str:
        """The map with the player (GiGPO's anchor state)."""
        return self.render()

    def move(self, action: int | None) -> tuple[float, bool]:
        """Gymnasium's step for an action id (None: an invalid reply, the player stays): (reward, done)."""
        if action is None:
            return 0.0, False
        _, reward, terminated, _, _ = self.lake.step(action)
        return float(reward), bool(terminated)

    def won(self) -> bool:
        """Whether the player stands on the goal."""
        return bool(self.lake.desc[divmod(int(self.lake.s), self.size)] == b"G")

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        before = self.render()
        action = parse_action(action_text)
        reward, done = self.move(action)
        self.steps += 1
        board = self.render()
        return turn_text(self.steps, board, board == before, self.agent_max_steps), reward, done, {"action_is_valid": action is not None, "success": self.won()}
