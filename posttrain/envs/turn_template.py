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

ROLL's VLTrajEnvManager (its vision-language episodes) writes each user turn from two templates
around the observation, which may be an image; the entry keys ``pre_step_template`` and
``next_step_template`` are the template ``pre_step_template + "{observation}" + next_step_template``
(ROLL fills the first with turn_idx, the second with actions_left and max_response_length), and the
env instruction opens the first user message with nothing between (``instruction_sep: ""``)::

    user:   env_instruction + pre_step_template.format(turn_idx=1) + <image> + next_step_template.format(...)

ROLL's ProxyEnvManager with its GEMRunner writes the same turns with two differences, which the
entry keys ``instruction_in: system`` and ``env_suffix: false`` select (posttrain.envs.runner_spec)::

    system: agent_system_template + "\n\n" + env_instruction (the template alone without an instruction)
    user:   agent_template.format(observation=o1, turn_idx=1, ..., suffix="")
"""

from __future__ import annotations

from dataclasses import dataclass

FIELDS = ("observation", "turn_idx", "actions_left", "max_response_length", "suffix")
INSTRUCTION_IN = ("user", "system")  # where the env instruction goes: head of the first user message, or the system message


@dataclass(frozen=True)
class TurnTemplate:
    """An entry's agent_template and agent_system_template in prompt_mode conversation."""

    template: str  # each observation turn's user message
    system: str | None  # the system message; the env instruction then opens the first user message
    instruction_in: str = "user"  # "system": the instruction follows the system template after a blank line (GEMRunner)
    env_suffix: bool = True  # False: {suffix} is written "" whatever the env's suffix() says (GEMRunner)
    instruction_sep: str = "\n"  # between the instruction and the first user turn ("" in ROLL's VLTrajEnvManager)

    def user(self, observation: str, turn_idx: int, actions_left: int, max_tokens: int | None, suffix: str = "") -> str:
        """The user message before action `turn_idx` (from 1)."""
        return self.template.format(observation=observation, turn_idx=turn_idx, actions_left=actions_left,
                                    max_response_length=max_tokens, suffix=suffix if self.env_suffix else "")

    def first(self, instruction: str, observation: str, max_steps: int, max_tokens: int | None, suffix: str = "") -> tuple[str, str]:
        """The (system, user) messages of the first prompt."""
        user = self.user(observation, 1, max_steps, max_tokens, suffix)
        if self.instruction_in == "system":  # as ROLL's GEMRunner writes its system message
            if self.system is None:
                return instruction, user
            return (f"{self.system}\n\n{instruction}" if instruction else self.system), user
        return self.system or "", f"{instruction}{self.instruction_sep}{user}" if instruction else user
