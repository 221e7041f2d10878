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

from typing import Any

from posttrain.agents.agentscope_react import _agent, _as
from posttrain.envs.trinity_frozen_lake import ACTIONS, SYSTEM_PROMPT as LAKE_PROMPT, UNCHANGED, TrinityFrozenLake, parse_action, turn_text

# The example's agent reads the same guide as Trinity-RFT's built-in FrozenLake workflow, spelled
# "iteration" where the built-in's says "interation".
SYSTEM_PROMPT = LAKE_PROMPT.replace("interation", "iteration")
MOVED_NOT = UNCHANGED.replace("interation", "iteration")
MAP_BOUND = 8  # the example environment's default max_steps, which its reset draws the map with
MAX_ITERS = 2  # reasoning-acting iterations of one reply, as the example's agent is built
WORDS = {word: action for word, action in ACTIONS.items() if word.isalpha()}  # left, down, right, up


def parse_move(text: str) -> int | None:
    """Gymnasium's action id of the reply's last ```` ``` ```` block when it is one of the four words, else None.

    >>> parse_move("```Left``` no, ```Up```"), parse_move("```4```"), parse_move("up")
    (3, None, None)
    """
    return parse_action(text, WORDS)


def smoke_row(i: int) -> dict[str, Any]:
    """The columns a lake row needs, for `posttrain smoke`'s stand-in rows (small lakes, one seed each)."""
    return {"size": 3 + i % 2, "p": 0.8, "seed": i}


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
    agent = _agent(base_url, SYSTEM_PROMPT, max_tokens, code_tool=False, meta_tool=False, max_iters=MAX_ITERS, name="frozenlake_agent")
    board, before = lake.render(), None
    total, steps, done, error = 0.0, 0, False, False
    for step in range(agent_max_steps):
        steps += 1
        try:
            reply = await agent.reply(_as().Msg("user", turn_text(step, board, step > 0 and before == board, agent_max_steps, MOVED_NOT), role="user"))
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

