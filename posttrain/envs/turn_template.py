"""The user and system text of an entry in prompt_mode conversation, when it gives an agent_template.

Without a template the conversation is the instruction (system message) and each observation as it
comes (a user message). With one, each observation turn is written through it, as ROLL's
trajectory env manager (TrajEnvManager) writes its turns::

    system: agent_system_template (none when the entry has none)
    user:   env_instruction + "\\n" + agent_template.format(observation=o1, turn_idx=1, actions_left=max_steps, ...)
    assistant: action 1
    user:   agent_template.format(observation=o2, turn_idx=2, actions_left=max_steps - 1, ...)
    ...

The fields are the observation, the number of the action the model is about to take (from 1), the
actions it has left counting that one, the entry's max_tokens_per_step, and the environment's
``suffix()`` ("" when it has none: ROLL's ``info["suffix"]``, e.g. GEM's "enter your next guess"). A tool env's observation
(a list of chat messages) is not written through the template: its messages follow as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

FIELDS = ("observation", "turn_idx", "actions_left", "max_response_length", "suffix")


@dataclass(frozen=True)
class TurnTemplate:
    """An entry's agent_template and agent_system_template in prompt_mode conversation."""

    template: str  # each observation turn's user message
    system: str | None  # the system message; the env instruction then opens the first user message

    def user(self, observation: str, turn_idx: int, actions_left: int, max_tokens: int | None, suffix: str = "") -> str:
        """The user message before action `turn_idx` (from 1)."""
        return self.template.format(observation=observation, turn_idx=turn_idx, actions_left=actions_left,
                                    max_response_length=max_tokens, suffix=suffix)

    def first(self, instruction: str, observation: str, max_steps: int, max_tokens: int | None, suffix: str = "") -> tuple[str, str]:
        """The (system, user) messages of the first prompt."""
        user = self.user(observation, 1, max_steps, max_tokens, suffix)
        return self.system or "", f"{instruction}\n{user}" if instruction else user
