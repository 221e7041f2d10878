"""`arithmetic`: one binary operation on random integers. Prompt ``12+7=``, answer ``19``.

Operands have up to `digits` digits (0 .. 10**digits - 1); the operator is drawn from `ops` (any of
``+ - *``). The answer must be an integer literal (optional leading minus) equal to the result.

The reward is right/wrong by default. With the task option `partial_credit` c > 0 (stored with every
row in ``extra_info["options"]``, so the scorer always matches the data), a wrong integer answer
earns

    c x (characters in the right place, aligned from the right as in written addition) / max(len(answer), len(truth))

so "118" for 119 earns 2/3 c and "19" for 119 earns 2/3 c as well, while anything that is not an
integer earns 0. Why: at the start of RL almost no sampled answer is exactly right, and a right/wrong
reward then leaves most GRPO groups without signal (shared notes "tiny-rl-recipe", where partial
credit on the sort task raised the gain from +36.5 to +55..70 points). `acc` stays exact match.
"""

from __future__ import annotations

import json
import random
import re

from posttrain.errors import ConfigError
from posttrain.tasks.answers import extract_answer
from posttrain.tasks.registry import Problem, TaskOption, register_task

OPS = ("+", "-", "*")
_INTEGER = re.compile(r"-?\d+")


def partial_credit_of(extra_info: dict | None) -> float:
    """The `partial_credit` option the row was written with (0.0 for rows without one).

    >>> partial_credit_of({"options": '{"digits": 2, "ops": ["+"], "partial_credit": 0.5}'})
    0.5
    >>> partial_credit_of(None)
    0.0
    """
    options = (extra_info or {}).get("options")
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except ValueError:
            return 0.0
    return float(options.get("partial_credit", 0.0)) if isinstance(options, dict) else 0.0


def score(solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict[str, float]:
    """1.0 when the answer is the right integer; else partial credit (module docstring), default 0.

    >>> score("19<|im_end|>", "19")
    {'score': 1.0, 'acc': 1.0}
    >>> score("18", "19")
    {'score': 0.0, 'acc': 0.0}
    >>> score("nineteen", "19")
    {'score': 0.0, 'acc': 0.0}
    >>> half = {"options": '{"partial_credit": 0.5}'}
    >>> score("118", "119", half)  # 2 of 3 places right: 0.5 * 2/3
    {'score': 0.3333333333333333, 'acc': 0.0}
    >>> score("19", "119", half)  # 2 places right, one missing: 0.5 * 2/3
    {'score': 0.3333333333333333, 'acc': 0.0}
    >>> score("119x", "119", half)  # not an integer
    {'score': 0.0, 'acc': 0.0}
    """
    answer = extract_answer(solution_str)
    if not _INTEGER.fullmatch(answer):
        return {"score": 0.0, "acc": 0.0}
    if int(answer) == int(ground_truth):
        return {"score": 1.0, "acc": 1.0}
    credit = partial_credit_of(extra_info)
    if credit <= 0.0:
        return {"score": 0.0, "acc": 0.0}
    in_place = sum(a == b for a, b in zip(reversed(answer), reversed(ground_truth)))
    return {"score": credit * in_place / max(len(answer), len(ground_truth)), "acc": 0.0}


@register_task(
    "arithmetic",
    description="a+b, a-b or a*b on random integers: '12+7=' -> '19' (right/wrong or partial-credit reward).",
    ability="arithmetic",
    score=score,
    options=[
        TaskOption("digits", 2, "Largest number of digits of each operand."),
        TaskOption("ops", ["+"], "Operators to draw from (quote '*' in a shell).", type=str, nargs="+", choices=OPS),
        TaskOption("partial_credit", 0.0, "Reward of a wrong integer answer with every digit in place "
                   "(scaled by the fraction in place); 0 is right/wrong.", type=float),
    ],
)
def generate(rng: random.Random, *, digits: int, ops: list[str], partial_credit: float = 0.0) -> Problem:
    """Draw two operands uniformly in [0, 10**digits) and one operator from `ops`.
    `partial_credit` only travels with the rows (to the scorer); it does not change the draw."""
    if not 0.0 <= partial_credit < 1.0:
        raise ConfigError(f"arithmetic --partial-credit must be in [0, 1), got {partial_credit}")
    if not 1 <= digits <= 18:
        raise ConfigError(f"arithmetic --digits must be between 1 and 18, got {digits}")
    if not ops or any(op not in OPS for op in ops):
        raise ConfigError(f"arithmetic --ops must be some of {' '.join(OPS)}, got {ops!r}")
    a, b = rng.randrange(10**digits), rng.randrange(10**digits)
    op = rng.choice(sorted(set(ops)))  # sorted: the draw must not depend on how the user listed them
    result = a + b if op == "+" else a - b if op == "-" else a * b
    return Problem(prompt=f"{a}{op}{b}=", ground_truth=str(result), response=str(result))
