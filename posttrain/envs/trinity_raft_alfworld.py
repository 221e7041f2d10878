"""`trinity_raft_alfworld`: the ALFWorld games of Trinity-RFT's ``RAFT_alfworld_workflow``.

Trinity-RFT's RAFT workflow (trinity/common/workflows/envs/alfworld/RAFT_alfworld_workflow.py) plays the
game file of each taskset row (its ``format.prompt_key`` column, ``game_file``) as `trinity_alfworld`
does, with its own rules, which this environment follows turn for turn:

- **Instruction**: its ``RAFT_prompt/alfworld_system.j2`` as Jinja renders it (the file has no
  variables; the rendering drops its final newline), word for word, with the literal ``\\n\\n`` it
  writes between the example's tags: each reply must hold ``<experience>``, ``<think>`` and
  ``<action>`` in that order.
- **Actions**: the three tags are read with Trinity's one pattern (`parse_response`); the action is the
  third, or ``""`` when the pattern does not match. A reply is ``action_is_valid`` when all three are
  non-empty: the workflow keeps for training only episodes whose every reply is
  (``algorithm.valid_actions_mask``).
- **Stops**: the episode ends, unsolved with reward 0, when the last three actions are the same (before
  the third is sent to the game); else after the game ends, or after 50 actions.
- **Reward**: the game's reward on the step that ends it, or on the 50th action (Trinity's "last
  reward", 0 for an unfinished ALFWorld game); every other step returns 0. ``success`` is a game ended
  with a reward of at least 1, the episodes the workflow fine-tunes on (``algorithm.min_score_mask``).

Observations are `trinity_alfworld`'s (``Observation: `` and the "Nothing happens." hint). The workflow's
fixed per-call cap of 4096 tokens is the translation's ``max_tokens_per_step``.
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.envs.registry import register_env
from posttrain.envs.trinity_alfworld import TrinityAlfworld, _check_game, _check_runtime, format_observation, start_game

# Trinity-RFT's RAFT_prompt/alfworld_system.j2 rendered (no variables; Jinja drops the final newline),
# word for word: the "\n\n" are the backslash-n characters the template writes, not line breaks.
SYSTEM_PROMPT = r"""You are an agent interacting with a virtual text-based environment.

## Response Format:
You MUST use this exact format for every response. All three tags are REQUIRED in sequential order:

<experience>Working principles, strategies, common knowledge, and potential pitfalls relevant to the current task.</experience>\n\n
<think>your reasoning process</think>\n\n
<action>exactly one action command</action>

## Action Commands:
  look:                             look around your current location
  inventory:                        check your current inventory(you can only have 1 item in your inventory)
  go to (receptacle):               move to a receptacle
  open (receptacle):                open a receptacle
  close (receptacle):               close a receptacle
  take (object) from (receptacle):  take an object from a receptacle
  move (object) to (receptacle):    place an object in or on a receptacle
  examine (something):              examine a receptacle or an object
  use (object):                     use an object
  heat (object) with (receptacle):  heat an object using a receptacle
  clean (object) with (receptacle): clean an object using a receptacle
  cool (object) with (receptacle):  cool an object using a receptacle
  slice (object) with (object):     slice an object using a sharp object

For example your output should be like this:
<experience>In household tasks, I should start by exploring the environment to understand available objects and receptacles. Common pitfalls include forgetting to check inventory capacity and not examining objects before taking action.</experience>\n\n<think> To solve the task, I need first to ... </think>\n\n<action>go to cabinet 1</action>

## Important Note:
You must ensure that the <experience> section contains descriptions of working principles, strategies, common sense knowledge, and potential pitfalls that are universally applicable to this type of task, rather than generic statements, placeholder content, or overly specific behavioral guidelines."""
MAX_ENV_STEPS = 50  # the workflow's fixed max_env_steps
REPEATS = 3  # this many identical actions in a row end the episode as a failure
# Trinity's parse_response: the three tags in order, each body stripped
_REPLY = re.compile(r"<experience>\s*(.*?)\s*</experience>.*?<think>\s*(.*?)\s*</think>.*?<action>\s*(.*?)\s*</action>", re.DOTALL)


def parse_response(text: str) -> tuple[str, str, str]:
    """(experience, think, action) of a reply, each "" when the reply does not hold the three tags in order.

    >>> parse_response("<experience>e</experience> <think> t </think><action>go to cabinet 1</action>")
    ('e', 't', 'go to cabinet 1')
    >>> parse_response("<think>t</think><action>look</action>")
    ('', '', '')
    """
    match = _REPLY.search(text)
    return (match.group(1).strip(), match.group(2).strip(), match.group(3).strip()) if match else ("", "", "")


@register_env("trinity_raft_alfworld")
class TrinityRaftAlfworld:
    """Trinity-RFT's RAFT ALFWorld workflow, one game file per episode (see the module docstring)."""

    instruction = SYSTEM_PROMPT
    check_runtime = staticmethod(_check_runtime)  # the packages (and runtime) it needs, checked at plan time
    episode_argument = "task_desc"  # rows name their episode by this column (posttrain.envs.spec)

    def __init__(self, task_desc: str | None = None):
        if not isinstance(task_desc, str) or not task_desc:
            raise ValueError("trinity_raft_alfworld needs task_desc, the path of an ALFWorld game.tw-pddl file: "
                             "give it in env_config or as a column of the entry's episode_files")
        _check_runtime()
        _check_game(task_desc)
        self.task_desc = task_desc
        self.game: Any = None
        self.actions: list[str] = []

    # stand-in episode rows (`posttrain smoke` without ALFWorld's games): trinity_alfworld's small game
    smoke_rows = staticmethod(TrinityAlfworld.smoke_rows)

    def reset(self, seed: int) -> str:
        self.close()
        self.game, observation = start_game(self.task_desc)
        self.actions = []
        return format_observation(observation)

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        experience, think, action = parse_response(action_text)
        info: dict[str, Any] = {"action_is_valid": bool(experience and think and action), "success": False}
        self.actions.append(action)
        if len(self.actions) >= REPEATS and len(set(self.actions[-REPEATS:])) == 1:
            # the workflow stops before sending the repeated action, as a failure with reward 0
            return "", 0.0, True, info
        observation, score, done, _ = self.game.step(action)
        if done or len(self.actions) >= MAX_ENV_STEPS:
            info["success"] = bool(done) and float(score) >= 1
            return format_observation(observation), float(score), True, info
        return format_observation(observation), 0.0, False, info

    def close(self) -> None:
        if self.game is not None:
            self.game.close()
            self.game = None
