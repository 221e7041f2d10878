"""Windowed step prompts: each action's prompt written afresh from a template (ROLL's step env managers).

In the default `conversation` prompt mode the model sees the whole episode so far as a growing chat.
In a window mode every step's prompt is built anew from the environment's instruction, a window of
the last few steps and the current observation, filled into `agent_template` (the user message;
`agent_system_template` is the system message when set)::

    step 3 of `window` with window 2:
      system: agent_system_template
      user:   agent_template.format(env_instruction=..., step_count=2, current_step=3, history_length=2,
                                    history="(step: 1, observation: o1, action: a1, reward: r1), (step: 2, ...)",
                                    current_observation=o3, max_response_length=max_tokens_per_step)

`window` writes each earlier step as ``(step: k, observation: ..., action: ..., reward: ...)``, joined
by ``, `` (ROLL's StepEnvManager; an invalid action gets a reminder of the format appended);
`observation_window` writes the earlier observations only, one per line, and fills only `history` and
`current_observation` (ROLL's StepConcatEnvManager, GEM's concatenating wrapper). The action shown is
what the action_pattern extracted, or "" when it rejected the text (ROLL's environments do the same).

`messages` (ROLL's AgentNativeStepEnvManager) has no template: the environment writes the whole
conversation itself. Its reset and every step return the chat messages so far (system, user,
assistant, ...; the model's text is its own to append), and each action's prompt is those messages
through the chat template with the generation prompt. The environment also reads the model's whole
text (it keeps it in its conversation), so the loop applies no action_pattern: the environment parses
the action and says whether it was valid (``info["action_is_valid"]``).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Sequence

MODES = ("conversation", "window", "observation_window", "messages")
HISTORY_STEPS = ("all", "invalid")
# The fields each window mode fills (ROLL's render_dict of each manager).
FIELDS = {
    "window": ("env_instruction", "history", "step_count", "history_length", "current_step", "current_observation", "max_response_length"),
    "observation_window": ("history", "current_observation"),
}
DEFAULT_TEMPLATES = {
    "window": "{env_instruction}\nLast steps: [{history}]\nStep {current_step}, observation:\n{current_observation}",
    "observation_window": "{history}\n{current_observation}",
}
# What ROLL's StepEnvManager appends to an invalid action in the history (its wording: a model trained
# on ROLL's prompts sees the same text).
INVALID_TIP = ("(IMPORTANT TIPS: this action is not valid, your new response *must* strictly adhere to the format "
               "according to env instructions.)")


@dataclass(frozen=True)
class PastStep:
    """One earlier step as the window shows it."""

    observation: str  # what the model was shown before the action
    action: str  # the action the pattern extracted ("" when it rejected the text)
    reward: float  # the env's reward plus any format penalty
    valid: bool


@dataclass(frozen=True)
class WindowSpec:
    """How one custom_envs entry writes its step prompts (mode `window` or `observation_window`)."""

    mode: str
    window: int | None  # earlier steps in the window; None: all of them
    history_steps: str  # all, or invalid: only the window's steps whose action was invalid (ROLL's StepEnvManager)
    template: str  # agent_template: the user message
    system_template: str | None  # agent_system_template: the system message, None for none

    def messages(self, instruction: str, past: Sequence[PastStep], observation: str, max_tokens: int | None,
                 suffix: str = "") -> tuple[str, str]:
        """(system, user) of the prompt of step len(past) + 1; system "" means no system message. `suffix`
        (the env's `suffix()`) follows the current observation in observation_window, as ROLL's
        StepConcatEnvManager writes ``observation + "\n" + suffix``."""
        steps = len(past)
        shown = list(past) if self.window is None else list(past[max(steps - self.window, 0):])
        first = steps - len(shown) + 1  # the 1-based step number of the window's first entry
        if self.mode == "observation_window":
            fields = {"history": "\n".join(p.observation for p in shown), "current_observation": f"{observation}\n{suffix}"}
        else:
            entries = [_entry(first + i, p) for i, p in enumerate(shown) if self.history_steps == "all" or not p.valid]
            fields = {"env_instruction": instruction, "history": ", ".join(entries), "step_count": steps,
                      "history_length": len(shown), "current_step": steps + 1, "current_observation": observation,
                      "max_response_length": max_tokens}
        return self.system_template or "", self.template.format(**fields)


def _entry(number: int, step: PastStep) -> str:
    action = step.action if step.valid else step.action + INVALID_TIP
    return f"(step: {number}, observation: {step.observation}, action: {action}, reward: {step.reward})"


def template_problems(key: str, mode: str, template: str, max_tokens: int | None) -> list[str]:
    """What is wrong with an agent_template for a window `mode`: fields it cannot fill, or a format error."""
    return fields_problems(key, mode, template, FIELDS[mode], max_tokens)


def fields_problems(key: str, mode: str, template: str, fields: Sequence[str], max_tokens: int | None) -> list[str]:
    """What is wrong with a template that `mode` fills with `fields`."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as e:
        return [f"{key}: not a format string ({e}); write fields as {{name}} and braces as {{{{ }}}}"]
    bad = sorted({n for n in names if n not in fields})
    if bad:
        return [f"{key}: fields {bad} are not filled in prompt_mode {mode}; it fills {list(fields)}"]
    if "max_response_length" in names and max_tokens is None:
        return [f"{key}: {{max_response_length}} is the entry's max_tokens_per_step, which is not set; set it"]
    return []
