"""The prompt-mode keys of a `custom_envs` entry, checked into a `WindowSpec` (posttrain.envs.window).

posttrain's keys, with ROLL's that stand for them::

    prompt_mode: window           # conversation (default) | window | observation_window | messages
                                  #   ROLL: env_manager_cls TrajEnvManager | StepEnvManager | StepConcatEnvManager
                                  #         | AgentNativeStepEnvManager
    history_window: 2             # earlier steps in the window (default 0; null: all)
                                  #   ROLL: history_length h, a window of h - 1 earlier steps (0: all)
    history_steps: all            # all | invalid (only the window's steps whose action was invalid)
    agent_template: "..."         # the user message (defaults in posttrain.envs.window)
    agent_system_template: "..."  # the system message (default none)
    pre_step_template: "..."      # conversation only: the user turn as pre + {observation} + next
    next_step_template: "..."     #   ROLL: VLTrajEnvManager (posttrain.envs.turn_template)

ROLL's StepEnvManager writes into its history only the window's steps whose action was invalid (its
``sar_history.append`` sits under the invalid-action check, roll/pipeline/agentic/env_manager/
step_env_manager.py), so ``env_manager_cls: ...StepEnvManager`` means ``history_steps: invalid``
unless the entry sets it; posttrain's own `prompt_mode: window` writes every step by default.

`prompt_mode: messages` takes none of the window keys: its environment writes the whole conversation.
"""

from __future__ import annotations

from typing import Any

from posttrain.envs.turn_template import FIELDS as TURN_FIELDS, INSTRUCTION_IN, TurnTemplate
from posttrain.envs.window import DEFAULT_TEMPLATES, HISTORY_STEPS, MODES, WindowSpec, template_problems
from posttrain.envs.window import fields_problems as _fields

_ROLL = "roll.pipeline.agentic.env_manager."
# ROLL's env manager classes and the prompt mode each one is
MANAGERS = {
    _ROLL + "traj_env_manager.TrajEnvManager": "conversation",
    _ROLL + "step_env_manager.StepEnvManager": "window",
    _ROLL + "step_concat_env_manager.StepConcatEnvManager": "observation_window",
    _ROLL + "agent_native_env_manager.AgentNativeStepEnvManager": "messages",
    _ROLL + "proxy_env_manager.ProxyEnvManager": "conversation",  # with GEMRunner only: posttrain.envs.runner_spec
    _ROLL + "vl_traj_env_manager.VLTrajEnvManager": "conversation",  # with pre/next_step_template: image observations
}
STEP_TEMPLATES = ("pre_step_template", "next_step_template")  # ROLL VLTrajEnvManager's two halves of a user turn
WINDOW_KEYS = ("prompt_mode", "history_window", "history_length", "history_steps", "agent_template", "agent_system_template",
               "instruction_in", "env_suffix", *STEP_TEMPLATES)
_TURN_ONLY = ("instruction_in", "env_suffix")  # how prompt_mode conversation writes its turns (posttrain.envs.turn_template)
_MESSAGES = "prompt_mode messages renders the environment's own conversation, with no template or window of steps; remove it"
_CONVERSATION = ("prompt_mode conversation shows the model the whole episode so far, with no window of earlier steps; "
                 "set prompt_mode: window for one")


def parse_window(entry: dict[str, Any], key: str, max_tokens: int | None) -> tuple[WindowSpec | None, list[str]]:
    """The entry's `WindowSpec` (None in prompt_mode conversation) and the problems of its keys."""
    mode, problems = entry_mode(entry, key)
    if mode is None:
        return None, problems
    if mode == "conversation":
        problems += [f"{key}.{k}: not supported: {_CONVERSATION}" for k in ("history_window", "history_length", "history_steps") if k in entry]
        return None, problems
    if mode == "messages":
        problems += [f"{key}.{k}: not read: {_MESSAGES}" for k in WINDOW_KEYS if k != "prompt_mode" and k in entry]
        return (None, problems) if problems else (WindowSpec("messages", None, "all", "", None), [])
    problems += [f"{key}.{k}: not supported in prompt_mode {mode}: its agent_template places the instruction and the suffix itself "
                 "({env_instruction}, {suffix}); remove the key" for k in _TURN_ONLY if k in entry]
    problems += [f"{key}.{k}: not supported in prompt_mode {mode}: it writes the user turns of prompt_mode conversation "
                 "(ROLL's VLTrajEnvManager), while a window mode writes each prompt with agent_template; remove the key"
                 for k in STEP_TEMPLATES if k in entry]
    window = _window(entry, key, problems)
    steps = entry.get("history_steps", "invalid" if entry.get("env_manager_cls") in MANAGERS and mode == "window" else "all")
    if steps not in HISTORY_STEPS:
        problems.append(f"{key}.history_steps: {steps!r}; choose one of {list(HISTORY_STEPS)}")
    elif mode == "observation_window" and "history_steps" in entry:
        problems.append(f"{key}.history_steps: observation_window shows every earlier observation of its window; remove the key")
    template = entry.get("agent_template", DEFAULT_TEMPLATES[mode])
    system = entry.get("agent_system_template")
    for name, text in (("agent_template", template), ("agent_system_template", system)):
        if text is not None and not isinstance(text, str):
            problems.append(f"{key}.{name}: expected a string, got {type(text).__name__}")
    if isinstance(template, str):
        problems += template_problems(f"{key}.agent_template", mode, template, max_tokens)
    if problems:
        return None, problems
    return WindowSpec(mode, window, steps, template, system), []


def parse_turn_template(entry: dict[str, Any], key: str, max_tokens: int | None) -> tuple[TurnTemplate | None, list[str]]:
    """The agent_template (or pre/next_step_template) / agent_system_template / instruction_in / env_suffix
    of an entry in prompt_mode conversation (None when it gives none of them: the instruction is then the
    system message and the observations the user messages as they are, which ``instruction_in: system``
    alone also means)."""
    where, suffix = entry.get("instruction_in", "user"), entry.get("env_suffix", True)
    problems = [] if where in INSTRUCTION_IN else [f"{key}.instruction_in: {where!r}; choose one of {list(INSTRUCTION_IN)}"]
    if not isinstance(suffix, bool):
        problems.append(f"{key}.env_suffix: true or false, got {suffix!r}")
    halves = [k for k in STEP_TEMPLATES if k in entry]
    if not halves and "agent_template" not in entry and "agent_system_template" not in entry and (
            where == "system" or "instruction_in" not in entry):
        return None, problems
    template, system = entry.get("agent_template", "{observation}"), entry.get("agent_system_template")
    texts = [("agent_template", template), ("agent_system_template", system), *((k, entry[k]) for k in halves)]
    problems += [f"{key}.{name}: expected a string, got {type(text).__name__}" for name, text in texts
                 if text is not None and not isinstance(text, str)]
    if halves and "agent_template" in entry:
        problems.append(f"{key}: agent_template and {'/'.join(halves)} both write the user turn; keep one")
    if problems:
        return None, problems
    if not halves:
        problems += _fields(f"{key}.agent_template", "conversation", template, TURN_FIELDS, max_tokens)
        return (None, problems) if problems else (TurnTemplate(template, system, where, suffix), [])
    # ROLL fills the first half with the turn and the second with what is left; each half is checked alone
    pre, post = entry.get("pre_step_template", ""), entry.get("next_step_template", "")
    problems += _fields(f"{key}.pre_step_template", "conversation", pre, ("turn_idx",), max_tokens)
    problems += _fields(f"{key}.next_step_template", "conversation", post, ("actions_left", "max_response_length"), max_tokens)
    return (None, problems) if problems else (TurnTemplate(pre + "{observation}" + post, system, where, suffix, ""), [])


def entry_mode(entry: dict[str, Any], key: str) -> tuple[str | None, list[str]]:
    """The entry's prompt mode (prompt_mode, else its ROLL env_manager_cls, else conversation), or None with the problem."""
    mode = entry.get("prompt_mode")
    if mode is not None and mode not in MODES:
        return None, [f"{key}.prompt_mode: {mode!r}; choose one of {list(MODES)}"]
    manager = MANAGERS.get(entry.get("env_manager_cls"))  # another class is refused by the entry's own checks
    if mode is not None and manager is not None and manager != mode:
        return None, [f"{key}: prompt_mode {mode} and env_manager_cls {entry['env_manager_cls']} ({manager}) disagree; keep one"]
    return mode or manager or "conversation", []


def _window(entry: dict[str, Any], key: str, problems: list[str]) -> int | None:
    """Earlier steps in the window: history_window, or ROLL's history_length h (its slice history[-h:-1]
    holds the h - 1 steps before the current one; h = 0 slices history[0:-1], every earlier step)."""
    if "history_window" in entry and "history_length" in entry:
        problems.append(f"{key}: history_window and ROLL's history_length both set; keep one (history_window = history_length - 1)")
        return 0
    if "history_length" in entry:
        h = entry["history_length"]
        if isinstance(h, bool) or not isinstance(h, int) or h < 0:
            problems.append(f"{key}.history_length: must be an integer >= 0 (ROLL: the window's length counting the current step), got {h!r}")
            return 0
        return None if h == 0 else h - 1
    w = entry.get("history_window", 0)
    if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
        problems.append(f"{key}.history_window: must be an integer >= 0 or null (every earlier step), got {w!r}")
        return 0
    return w
