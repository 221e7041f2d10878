"""Named prompt templates (`data.chat_template_name`): ROLL's template names, written for posttrain.

A ROLL config names how a prompt becomes text (`actor_train.data_args.template: qwen2_5`). Each
name here means what it means in ROLL, so a ROLL file renders the same prompts:

| name | the prompt is |
|---|---|
| `native`, `qwen2_5` | the run's chat template (data.chat_template, else the tokenizer's) as it is |
| `qwen3` | the run's chat template with `enable_thinking=True` |
| `chatml` | ChatML: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then ``<|im_start|>assistant\\n`` |
| `empty` | ChatML of one user message, whatever the tokenizer's template is |
| `base` | one user message inside a plain-text R1-style instruction ending in ``Assistant:`` (for base models) |
| `longCOT_qwen2.5` | the run's chat template; a long-thought system prompt when the row has none, and every user message prefixed with ``Return your final response within \\boxed{}.`` |
| `longcot_V3` | the run's chat template followed by ``<think>\\n`` after the assistant header |

`empty` and `base` format exactly one user message (an RL prompt): a system prompt, several turns or
a `data.reply_prefix` is refused naming the row. The texts of `base` and `longCOT_qwen2.5` are the
ones ROLL's names stand for, character for character (`base` writes ``\\boxed{{}}`` with doubled
braces, as ROLL's prompt does), since a prompt that differs by one character is another prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from posttrain.config.sections.data import CHAT_TEMPLATE_NAMES


@dataclass(frozen=True)
class NamedTemplate:
    """What a name changes; None/empty fields leave the run's own setting in place."""

    jinja: str | None = None  # its own chat template; None keeps the run's
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # template variables (explicit data.* settings win)
    system_prompt: str | None = None  # first message when a conversation has no system message
    user_prefix: str = ""  # put before the content of every user message
    generation_suffix: str = ""  # written after the assistant header of a prompt


def _one_user_message(name: str) -> str:
    """Jinja that refuses anything but a single user message (the templates that format only that)."""
    return (
        "{% if messages | length != 1 or messages[0]['role'] != 'user' %}"
        f"{{{{ raise_exception('the {name} template formats exactly one user message (an RL prompt); "
        "use another data.chat_template_name for system prompts, conversations or data.reply_prefix') }}"
        "{% endif %}"
    )


_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# the closing literal is an expression: jinja drops a template's final newline
_EMPTY = _one_user_message("empty") + "<|im_start|>user\n{{ messages[0]['content'] }}<|im_end|>\n{{ '<|im_start|>assistant\n' }}"
_BASE_BEFORE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer, ensuring that the final result in the answer is enclosed in \\boxed{{}}. The reasoning "
    "process and answer are enclosed within '<think>' '</think>' and '<answer>' '</answer>' tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>. User: "
)
# raw blocks: the instruction's literal braces must not be read as jinja
_BASE = (_one_user_message("base") + "{% raw %}" + _BASE_BEFORE + "{% endraw %}{{ messages[0]['content'] }}"
         "{% raw %} Assistant:{% endraw %}")
_LONG_THOUGHT_SYSTEM = (
    "Your role as an assistant involves thoroughly exploring questions through a systematic long thinking "
    "process before providing the final precise and accurate solutions. This requires engaging in a "
    "comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, backtracing, and "
    "iteration to develop well-considered thinking process. Please structure your response into two main "
    "sections: Thought and Solution. In the Thought section, detail your reasoning process using the "
    "specified format: <|begin_of_thought|> {thought with steps separated with '\\n\\n'} <|end_of_thought|> "
    "Each step should include detailed considerations such as analisying questions, summarizing relevant "
    "findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, "
    "and revisiting previous steps. In the Solution section, based on various attempts, explorations, and "
    "reflections from the Thought section, systematically present the final solution that you deem "
    "correct. The solution should remain a logical, accurate, concise expression style and detail "
    "necessary step needed to reach the conclusion, formatted as follows: <|begin_of_solution|> {final "
    "formatted, precise, and clear solution} <|end_of_solution|> Now, try to solve the following question "
    "through the above guidelines:"
)

TEMPLATES: dict[str, NamedTemplate] = {
    "native": NamedTemplate(),
    "qwen2_5": NamedTemplate(),
    "qwen3": NamedTemplate(kwargs={"enable_thinking": True}),
    "chatml": NamedTemplate(jinja=_CHATML),
    "empty": NamedTemplate(jinja=_EMPTY),
    "base": NamedTemplate(jinja=_BASE),
    "longCOT_qwen2.5": NamedTemplate(system_prompt=_LONG_THOUGHT_SYSTEM,
                                     user_prefix="Return your final response within \\boxed{}. "),
    "longcot_V3": NamedTemplate(generation_suffix="<think>\n"),
}
# The config schema lists the names (it may not import this layer); both must agree.
assert tuple(TEMPLATES) == CHAT_TEMPLATE_NAMES, "posttrain.config.sections.data.CHAT_TEMPLATE_NAMES is out of date"


def named_template(name: str) -> NamedTemplate:
    """The template `name` stands for (the config validator has already checked the name)."""
    return TEMPLATES[name]


def with_suffix(template: str, suffix: str) -> str:
    """`template` followed by `suffix` after the assistant header of a prompt (never after a whole
    conversation: SFT sequences end with the assistant's own turn)."""
    if not suffix:
        return template
    return template + "{% if add_generation_prompt %}" + "{% raw %}" + suffix + "{% endraw %}{% endif %}"
