"""`tool_calc`: a product too large to do in one's head, with a calculator tool to call.

Prompt ``347*829=``, answer ``287663``. The correct conversation (the SFT trace) calls the
`calculator` tool in Hermes format, reads its answer and repeats it::

    assistant: <tool_call>\\n{"name": "calculator", "arguments": {"expression": "347*829"}}\\n</tool_call>
    tool:      287663
    assistant: 287663

Run it with tool calling on (`rollout.multi_turn`, examples/tool_calculator.yaml). The scorer grades
the last assistant turn of the conversation (the text after the last assistant header, up to its end
of turn): 1.0 for the right integer, else 0. It also reports ``correct_call``: 1.0 when some
calculator call in the conversation computes the right product (the share of correct tool calls).
"""

from __future__ import annotations

import json
import random

from posttrain.errors import ConfigError
from posttrain.tools.calculator import evaluate
from posttrain.tools.hermes import parse_hermes
from posttrain.tasks.answers import extract_answer
from posttrain.tasks.registry import Problem, TaskOption, register_task

ASSISTANT = "<|im_start|>assistant\n"


def call_text(expression: str) -> str:
    """The Hermes call of the calculator on `expression`, as Qwen2.5 writes it."""
    return "<tool_call>\n" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "\n</tool_call>"


def final_answer(solution_str: str) -> str:
    """The graded text: the conversation's last assistant turn (after the last assistant header).

    >>> final_answer('<tool_call>x</tool_call><|im_end|>\\n<|im_start|>user\\n<tool_response>\\n6\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n6<|im_end|>')
    '6'
    """
    return extract_answer(solution_str.rpartition(ASSISTANT)[2])


def _correct_call(solution_str: str, truth: int) -> bool:
    for call in parse_hermes(solution_str):
        if call.name == "calculator" and call.arguments is not None:
            try:
                if evaluate(call.arguments.get("expression")) == str(truth):
                    return True
            except (ValueError, OverflowError):
                continue
    return False


def score(solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict[str, float]:
    """1.0 when the last turn is the right integer (module docstring), and whether a call was right.

    >>> right = call_text("12*13") + "<|im_end|>\\n<|im_start|>user\\n<tool_response>\\n156\\n</tool_response><|im_end|>\\n" + ASSISTANT + "156<|im_end|>"
    >>> score(right, "156")
    {'score': 1.0, 'acc': 1.0, 'correct_call': 1.0, 'called': 1.0}
    >>> score("156<|im_end|>", "156")  # right without the tool
    {'score': 1.0, 'acc': 1.0, 'correct_call': 0.0, 'called': 0.0}
    """
    answer = final_answer(solution_str)
    right = answer.lstrip("-").isdigit() and int(answer) == int(ground_truth)
    called = "<tool_call>" in solution_str
    return {"score": float(right), "acc": float(right), "correct_call": float(_correct_call(solution_str, int(ground_truth))),
            "called": float(called)}


@register_task(
    "tool_calc",
    description="a*b with a calculator tool: '347*829=' -> call calculator, read 287663, answer it (multi-turn, rollout.multi_turn).",
    ability="tool_use",
    score=score,
    options=[TaskOption("digits", 3, "Digits of each factor (the product is beyond a tiny model's head).")],
)
def generate(rng: random.Random, *, digits: int) -> Problem:
    """Two factors of exactly `digits` digits; the SFT trace calls the calculator."""
    if not 1 <= digits <= 9:
        raise ConfigError(f"tool_calc --digits must be between 1 and 9, got {digits}")
    low = 10 ** (digits - 1) if digits > 1 else 0
    a, b = rng.randrange(low, 10**digits), rng.randrange(low, 10**digits)
    expression, result = f"{a}*{b}", str(a * b)
    turns = ({"role": "assistant", "content": call_text(expression)}, {"role": "tool", "content": result},
             {"role": "assistant", "content": result})
    return Problem(prompt=f"{expression}=", ground_truth=result, response=result, turns=turns)
