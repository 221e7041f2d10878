"""`arithmetic`: one binary operation on random integers. Prompt ``12+7=``, answer ``19``.

Operands have up to `digits` digits (0 .. 10**digits - 1); the operator is drawn from `ops` (any of
``+ - *``). The reward is right/wrong: the answer must be an integer literal (optional leading minus)
equal to the result. The shared notes found addition learnable on CPU after an SFT warm-up that
reaches ~20 % on a dev set.
"""

from __future__ import annotations

import random
import re

from posttrain.errors import ConfigError
from posttrain.tasks.answers import extract_answer
from posttrain.tasks.registry import Problem, TaskOption, register_task

OPS = ("+", "-", "*")
_INTEGER = re.compile(r"-?\d+")


def score(solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict[str, float]:
    """1.0 when the answer is the right integer, else 0.0.

    >>> score("19<|im_end|>", "19")
    {'score': 1.0, 'acc': 1.0}
    >>> score("18", "19")
    {'score': 0.0, 'acc': 0.0}
    >>> score("nineteen", "19")
    {'score': 0.0, 'acc': 0.0}
    """
    answer = extract_answer(solution_str)
    correct = bool(_INTEGER.fullmatch(answer)) and int(answer) == int(ground_truth)
    value = 1.0 if correct else 0.0
    return {"score": value, "acc": value}


@register_task(
    "arithmetic",
    description="a+b, a-b or a*b on random integers: '12+7=' -> '19' (right/wrong reward).",
    ability="arithmetic",
    score=score,
    options=[
        TaskOption("digits", 2, "Largest number of digits of each operand."),
        TaskOption("ops", ["+"], "Operators to draw from (quote '*' in a shell).", type=str, nargs="+", choices=OPS),
    ],
)
def generate(rng: random.Random, *, digits: int, ops: list[str]) -> Problem:
    """Draw two operands uniformly in [0, 10**digits) and one operator from `ops`."""
    if not 1 <= digits <= 18:
        raise ConfigError(f"arithmetic --digits must be between 1 and 18, got {digits}")
    if not ops or any(op not in OPS for op in ops):
        raise ConfigError(f"arithmetic --ops must be some of {' '.join(OPS)}, got {ops!r}")
    a, b = rng.randrange(10**digits), rng.randrange(10**digits)
    op = rng.choice(sorted(set(ops)))  # sorted: the draw must not depend on how the user listed them
    result = a + b if op == "+" else a - b if op == "-" else a * b
    return Problem(prompt=f"{a}{op}{b}=", ground_truth=str(result), response=str(result))
