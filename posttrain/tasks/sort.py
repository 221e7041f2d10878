"""`sort`: sort random digits. Prompt ``:51393=``, answer ``13359``.

The task that learns most reliably on 2 CPU cores (shared notes "tiny-rl-recipe": 7 of 7 GRPO runs
went from ~20 % to 75-86 % greedy accuracy). Its reward gives partial credit, because at the start
almost no sampled answer is exactly right and a right/wrong reward leaves GRPO groups with no signal:

    1.0 if the answer is exactly right, otherwise
    0.8 x (fraction of the ground truth's positions holding the right digit) - 0.1 if the length is wrong.

`acc` is the exact-match accuracy, the number to report.
"""

from __future__ import annotations

import random

from posttrain.errors import ConfigError
from posttrain.tasks.answers import extract_answer
from posttrain.tasks.registry import Problem, TaskOption, register_task


def score(solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict[str, float]:
    """Partial-credit score of a sorted-digits answer (see the module docstring).

    >>> score("13359<|im_end|>", "13359")
    {'score': 1.0, 'acc': 1.0}
    >>> score("13395", "13359")  # 3 of 5 positions right: 0.8 * 3/5
    {'score': 0.48, 'acc': 0.0}
    >>> score("1335", "13359")  # 4 of 5 right, wrong length: 0.8 * 4/5 - 0.1
    {'score': 0.54, 'acc': 0.0}
    >>> score("", "13359")
    {'score': -0.1, 'acc': 0.0}
    """
    answer = extract_answer(solution_str)
    if answer == ground_truth:
        return {"score": 1.0, "acc": 1.0}
    right = sum(a == b for a, b in zip(answer, ground_truth))
    value = 0.8 * right / max(len(ground_truth), 1)
    if len(answer) != len(ground_truth):
        value -= 0.1
    return {"score": round(value, 10), "acc": 0.0}


@register_task(
    "sort",
    description="Sort random digits: ':51393=' -> '13359' (partial-credit reward).",
    ability="algorithmic",
    score=score,
    options=[TaskOption("length", 5, "How many digits to sort.")],
)
def generate(rng: random.Random, *, length: int) -> Problem:
    """Draw `length` uniform digits (repeats allowed)."""
    if not 1 <= length <= 64:
        raise ConfigError(f"sort --length must be between 1 and 64, got {length}")
    digits = "".join(rng.choice("0123456789") for _ in range(length))
    answer = "".join(sorted(digits))
    return Problem(prompt=f":{digits}=", ground_truth=answer, response=answer)
