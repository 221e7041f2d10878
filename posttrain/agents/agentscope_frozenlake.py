"""AgentScope's ReAct agent walking a FrozenLake, as a posttrain agent function.

Trinity-RFT's example ``agentscope_frozenlake`` (its workflow
``examples.agentscope_frozenlake.workflow.FrozenLakeWorkflow``) trains an AgentScope v1 `ReActAgent`
that plays one lake per taskset row: each move is one reply of the agent, whose model call is
recorded and trained as a turn of the episode (algorithm ``multi_step_grpo``: posttrain's
``env.train_rows: turn``). `frozenlake_agent` is that episode:

- **The lake** is the row's (``size``, ``p``, ``seed``; ``is_slippery`` from the row, else the
  workflow's), drawn by the generator of Trinity-RFT's FrozenLake (`trinity_map`, the same as the
  example's) with its reachability bound of 8 moves: the example's environment redraws its map on
  reset with its own default bound whatever ``env_max_steps`` says. Dynamics are gymnasium's
  (posttrain.envs.trinity_frozen_lake).
- **The agent** has the FrozenLake system prompt (`SYSTEM_PROMPT`), no tools and at most 2
  reasoning-acting iterations per reply; its memory keeps the whole walk, so each call sees the
  conversation so far. Its model is an `OpenAIChatModel` at the episode's base URL.
- **Each move** sends ``Current Observation (k):``, the map, the not-yet line, a notice when the map
  is as it was before the previous move, and the moves left of ``agent_max_steps``; the action is the
  reply's last ```` ``` ```` block, lower-cased, one of ``left``, ``down``, ``right``, ``up`` (numbers
  are not actions here); anything else leaves the player where it is (reward 0, the walk goes on).
  The walk ends at the goal or a hole, or after ``agent_max_steps`` replies.
- **The reward** is the sum of the moves' rewards (1.0 at the goal), given to every call of the
  episode. A reply that fails (the agent raises) ends the walk with what it had, as the example does.

Returned metrics: ``env_steps``, ``env_done``, ``success``, ``agent_error``.
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.agents.agentscope_react import _as
from posttrain.envs.trinity_frozen_lake import ACTIONS, NOT_YET, SYSTEM_PROMPT as LAKE_PROMPT, UNCHANGED, TrinityFrozenLake

# The example's agent reads the same guide as Trinity-RFT's built-in FrozenLake workflow, spelled
# "iteration" where the built-in's says "interation".
SYSTEM_PROMPT = LAKE_PROMPT.replace("interation", "iteration")
MOVED_NOT = UNCHANGED.replace("interation", "iteration")
MAP_BOUND = 8  # the example environment's default max_steps, which its reset draws the map with
MAX_ITERS = 2  # reasoning-acting iterations of one reply, as the example's agent is built
WORDS = {word: action for word, action in ACTIONS.items() if word.isalpha()}  # left, down, right, up
_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)


def parse_move(text: str) -> int | None:
    """Gymnasium's action id of the reply's last ```` ``` ```` block when it is one of the four words, else None.

    >>> parse_move("```Left``` no, ```Up```"), parse_move("```4```"), parse_move("up")
    (3, None, None)
    """
    blocks = _BLOCK.findall(text)
    return WORDS.get(blocks[-1].strip().lower()) if blocks else None


def move_prompt(step: int, board: str, unchanged: bool, agent_max_steps: int) -> str:
    """The user message of move `step` (from 0)."""
    text = f"Current Observation ({step}): \n{board}\n{NOT_YET}" + (MOVED_NOT if unchanged else "")
    left = agent_max_steps - step
    return text + (f"\nThe maximum number of steps remaining is {left}." if left > 0 else "")


async def frozenlake_agent(base_url: str, row: dict[str, Any], *, agent_max_steps: int = 10, is_slippery: bool = False,
                           max_tokens: int | None = None) -> dict[str, float]:
    """One walk of the example's agent over the row's lake (module docstring)."""
    missing = [k for k in ("size", "seed") if k not in row]
    if missing:
        raise KeyError(f"the row has no column {missing} (its columns: {sorted(row)}); a FrozenLake row gives the lake's "
                       "size, p and seed, as Trinity-RFT's get_frozen_lake_data.py writes them")
    lake = TrinityFrozenLake(size=int(row["size"]), p=float(row.get("p", 0.8)), is_slippery=bool(row.get("is_slippery", is_slippery)),
                             env_max_steps=MAP_BOUND, agent_max_steps=agent_max_steps)
    lake.reset(int(row["seed"]))
    agent = _agent(base_url, max_tokens)
    board, before = lake.render(), None
    total, steps, done, error = 0.0, 0, False, False
    for step in range(agent_max_steps):
        steps += 1
        try:
            reply = await agent.reply(_as().Msg("user", move_prompt(step, board, step > 0 and before == board, agent_max_steps), role="user"))
        except Exception:  # noqa: BLE001 - the example ends the walk on any failure of the agent and keeps its calls
            error = True
            break
        before = board
        reward, done = lake.move(parse_move(reply.get_text_content() or ""))
        board, total = lake.render(), total + reward
        if done:
            break
    return {"reward": total, "env_steps": float(steps), "env_done": float(done), "success": float(lake.won()),
            "agent_error": float(error)}


def _agent(base_url: str, max_tokens: int | None) -> Any:
    """A fresh ReActAgent (its own memory: one walk) whose model calls the episode's endpoint."""
    a = _as()
    kwargs = {"max_tokens": int(max_tokens)} if max_tokens else {}
    model = a.PolicyModel(model_name="policy", api_key="EMPTY", stream=False, generate_kwargs=kwargs,
                          client_kwargs={"base_url": base_url, "max_retries": 0})
    agent = a.ReActAgent(name="frozenlake_agent", sys_prompt=SYSTEM_PROMPT, model=model, formatter=a.OpenAIChatFormatter(),
                         toolkit=a.Toolkit(), memory=a.InMemoryMemory(), max_iters=MAX_ITERS)
    agent.set_console_output_enabled(False)  # episodes run by the hundred: no printing of every message
    return agent
