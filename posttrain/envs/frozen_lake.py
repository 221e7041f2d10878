"""`frozen_lake`: gymnasium's toy-text FrozenLake as a text environment, laid out as ROLL's.

The dynamics are gymnasium's own `FrozenLakeEnv` (imported when the first lake is built; the
`envs` extra installs gymnasium): moving onto the goal gives reward 1.0 and ends the episode, a hole
ends it with 0.0, the edge of the map stops the player, and on slippery ice (`is_slippery`) the
player moves in the intended direction or one of the two perpendicular ones, a third each.

Maps are drawn by seed, so the environments of one group play the same lake:

- `random_start: true` (ROLL's layout, the default): the player and the goal stand on two random
  distinct cells; every other cell is frozen with probability `p`, else a hole; maps are redrawn
  until the goal can be reached.
- `random_start: false`: gymnasium's own `generate_random_map` (start top-left, goal bottom-right).

The map is shown as ROLL renders it, one row per line: ``P`` player, ``_`` frozen, ``O`` hole,
``G`` goal, ``X`` player in a hole, ``√`` player on the goal. An action is one of the words
``Left``, ``Down``, ``Right``, ``Up`` (any case, surrounding spaces ignored); anything else is an
invalid action: the player stays and ``action_is_valid`` is False. With ``render_mode: rgb_array``
(ROLL's vision-language examples) every observation is the map drawn as an RGB array instead
(posttrain.envs.grid_image).

>>> lake = FrozenLake(size=3, is_slippery=False)
>>> print(lake.reset(seed=0))
__G
_OP
___
>>> lake.step("Down")
('__G\\n_O_\\n__P', 0.0, False, {'action_is_valid': True, 'success': False})
>>> lake.step(" up")
('__G\\n_OP\\n___', 0.0, False, {'action_is_valid': True, 'success': False})
>>> lake.step("Up")
('__√\\n_O_\\n___', 1.0, True, {'action_is_valid': True, 'success': True})
"""

from __future__ import annotations

from collections import deque
from typing import Any

from posttrain.envs.grid_image import Tile, check_render_mode, draw_grid
from posttrain.envs.registry import register_env

ACTIONS = {"left": 0, "down": 1, "right": 2, "up": 3}  # gymnasium's action ids
MOVES = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}  # (row, column) step of each action
WORDS = ("Left", "Down", "Right", "Up")
SYMBOLS = {b"F": "_", b"S": "_", b"H": "O", b"G": "G"}
_ICE, _HOLE, _GOAL, _PLAYER = (200, 228, 245), (30, 50, 90), (90, 180, 90), (220, 80, 60)
TILES = {"_": Tile(_ICE), "O": Tile(_HOLE), "G": Tile(_GOAL), "P": Tile(_PLAYER, on=_ICE), "X": Tile(_PLAYER, on=_HOLE),
         "√": Tile(_PLAYER, on=_GOAL)}


def reachable(board: list[list[str]], start: tuple[int, int]) -> bool:
    """Whether a path over non-hole cells leads from `start` to the goal."""
    return bool(shortest_path(board, start))


def shortest_path(board: list[list[str]] | list[str], start: tuple[int, int]) -> list[int]:
    """Gymnasium action ids of a shortest hole-free path from `start` to the goal (empty if none or
    already there), by breadth-first search; ties go to the lower action id (Left before Down ...)."""
    n_rows, n_cols = len(board), len(board[0])
    parent: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if board[cell[0]][cell[1]] == "G":
            path = []
            while parent[cell] is not None:
                cell, action = parent[cell]  # type: ignore[misc]
                path.append(action)
            return path[::-1]
        for action, (dr, dc) in MOVES.items():
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < n_rows and 0 <= c < n_cols and (r, c) not in parent and board[r][c] != "H":
                parent[(r, c)] = (cell, action)
                queue.append((r, c))
    return []


def random_map(size: int, p: float, seed: int) -> list[str]:
    """ROLL's layout: start and goal on random distinct cells, holes with probability 1 - p, redrawn
    until the goal is reachable (numpy's generator seeded as gymnasium seeds its own)."""
    from gymnasium.utils import seeding

    rng, _ = seeding.np_random(seed)
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p]).tolist()
        start, goal = tuple(int(x) for x in rng.integers(size, size=2)), tuple(int(x) for x in rng.integers(size, size=2))
        if start == goal:
            continue
        board[start[0]][start[1]], board[goal[0]][goal[1]] = "S", "G"
        if reachable(board, start):
            return ["".join(row) for row in board]


@register_env("frozen_lake")
class FrozenLake:
    """Walk over a frozen lake to the goal without falling into a hole (see the module docstring)."""

    instruction = ("FrozenLake: move the player P to the goal G. _ is ice, O is a hole: stepping in it ends the game. "
                   "Answer with one action: Left, Down, Right or Up.")

    def __init__(self, size: int = 4, p: float = 0.8, is_slippery: bool = True, random_start: bool = True,
                 render_mode: str = "text"):
        self.render_mode = check_render_mode(render_mode)
        if not 2 <= size <= 16:
            raise ValueError(f"size must be between 2 and 16, got {size}")
        if not 0.0 < p <= 1.0:
            raise ValueError(f"p (the chance a cell is frozen) must be in (0, 1], got {p}")
        try:
            import gymnasium  # noqa: F401  (the lake's dynamics)
        except ImportError:
            raise ValueError("frozen_lake steps gymnasium's FrozenLake: pip install 'posttrain[envs]' (or gymnasium)") from None
        self.size, self.p, self.is_slippery, self.random_start = size, p, bool(is_slippery), bool(random_start)
        self.lake: Any = None

    def reset(self, seed: int) -> str:
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map

        desc = random_map(self.size, self.p, seed) if self.random_start else generate_random_map(self.size, self.p, seed)
        self.lake = FrozenLakeEnv(desc=desc, is_slippery=self.is_slippery)
        self.lake.reset(seed=seed)  # seeds the slips too: a group's lakes slip alike until their actions differ
        return self.observation()

    @property
    def position(self) -> tuple[int, int]:
        return divmod(int(self.lake.s), self.size)

    def render(self) -> str:
        rows = [[SYMBOLS[cell] for cell in row] for row in self.lake.desc.tolist()]
        r, c = self.position
        rows[r][c] = {b"H": "X", b"G": "√"}.get(self.lake.desc[r][c], "P")
        return "\n".join("".join(row) for row in rows)

    def observation(self) -> Any:
        """The map as the policy sees it: the text, or its picture with render_mode rgb_array."""
        return self.render() if self.render_mode == "text" else draw_grid(self.render(), TILES)

    def state(self) -> str:
        """The map with the player: identical states of a group's lakes group their steps (GiGPO)."""
        return self.render()

    def expert_action(self) -> str:
        """The first action of a shortest hole-free path to the goal (ignoring slips)."""
        board = [[cell.decode() for cell in row] for row in self.lake.desc.tolist()]
        path = shortest_path(board, self.position)
        return WORDS[path[0]] if path else WORDS[0]

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        action = ACTIONS.get(action_text.strip().lower())
        if action is None:
            return self.observation(), 0.0, False, {"action_is_valid": False, "success": False}
        _, reward, terminated, _, _ = self.lake.step(action)
        won = self.lake.desc[self.position] == b"G"
        return self.observation(), float(reward), bool(terminated), {"action_is_valid": True, "success": bool(won)}
