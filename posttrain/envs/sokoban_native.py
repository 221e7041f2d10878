"""`sokoban_native_env`: Sokoban that writes its own conversation (prompt_mode messages).

ROLL's AgentNativeStepEnvManager plays environments that keep the chat themselves: the reset returns
the opening messages, and every step appends the model's text as the assistant message and the
environment's answer as the next user message, and returns the whole conversation. This is that
environment over posttrain's `sokoban` rooms (the same rooms, rewards and termination for a seed)::

    system:    system_template + "\\n\\n" + the rules (the `sokoban` instruction)
    user:      "The room now:\\n<room>\\n\\n" + observation_suffix
    assistant: the model's text, as it wrote it
    user:      "The room now:\\n<room>\\n\\n" + observation_suffix
    ...

The action is the last group of `action_pattern` in the model's text (the whole match for a pattern
without groups); a text it does not match, or a word that is not a move, is an invalid action: nothing
moves, the step's -0.1 still applies, and ``action_is_valid`` is False, so the entry's format_penalty
is added on top. ROLL's environment of this name meant to prepend a reminder of the format to the
answer after an invalid action, but tests its parent's info for a key that info does not carry at its
top level, so its prompts never show the reminder; neither do these.

The texts are posttrain's own; `system_template` and `observation_suffix` replace them.
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.envs.registry import register_env
from posttrain.envs.sokoban import Sokoban

DEFAULT_SYSTEM = "You play puzzle games well, and you aim for the highest reward."
DEFAULT_SUFFIX = ("Reply with one action in the form <answer>Action</answer> and nothing else, for example <answer>Left</answer>. "
                  "The actions are Up, Down, Left and Right.\nYour next action:")


@register_env("sokoban_native_env")
class SokobanNative(Sokoban):
    """A Sokoban room whose observations are the conversation so far (see the module docstring)."""

    # expert trajectories (posttrain make-env-data) are written for text observations: not this one's
    expert_action = None

    def __init__(self, dim_room: tuple[int, int] | list[int] = (6, 6), num_boxes: int = 1, search_depth: int = 300,
                 action_pattern: str = "<answer>(.*?)</answer>", system_template: str | None = None,
                 observation_suffix: str | None = None):
        super().__init__(dim_room, num_boxes, search_depth)
        self.pattern = re.compile(action_pattern, re.DOTALL)
        self.system_template = DEFAULT_SYSTEM if system_template is None else system_template
        self.observation_suffix = DEFAULT_SUFFIX if observation_suffix is None else observation_suffix
        self.messages: list[dict[str, str]] = []

    def _answer(self, room: str) -> dict[str, str]:
        return {"role": "user", "content": f"The room now:\n{room}\n\n{self.observation_suffix}"}

    def reset(self, seed: int) -> list[dict[str, str]]:  # type: ignore[override]
        room = super().reset(seed)
        self.messages = [{"role": "system", "content": f"{self.system_template}\n\n{self.instruction}"}, self._answer(room)]
        return [dict(m) for m in self.messages]

    def action(self, text: str) -> str:
        """The move word in the model's text ("" when the pattern does not match: an invalid action)."""
        found = self.pattern.search(text)
        if found is None:
            return ""
        return (found.group(self.pattern.groups) if self.pattern.groups else found.group(0)).strip()

    def step(self, action_text: str) -> tuple[list[dict[str, str]], float, bool, dict[str, Any]]:  # type: ignore[override]
        self.messages.append({"role": "assistant", "content": action_text})
        room, reward, done, info = super().step(self.action(action_text))
        self.messages.append(self._answer(room))
        return [dict(m) for m in self.messages], reward, done, info
