"""`countdown`: reach a target from given numbers. Prompt ``3,5,7->22:``, an answer ``3*5+7``.

The answer is an arithmetic expression using ``+ - * /``, parentheses and each given number at most
once. It is parsed with `ast` and evaluated exactly with fractions; nothing is ever passed to eval().
Reward: 1.0 when the expression equals the target, FORMAT_SCORE when it is a valid expression over
the given numbers but misses the target, 0.0 otherwise. The ground truth is JSON:
``{"numbers": [3, 5, 7], "target": 22}``.

Every generated problem is solvable: the target is the value of a random expression over all the
numbers, which is also the SFT response. The shared notes found this task too hard for sub-3M
parameter models (+4 to +11.5 points); it is here as a harder benchmark.
"""

from __future__ import annotations

import ast
import json
import random
from collections import Counter
from fractions import Fraction

from posttrain.errors import ConfigError
from posttrain.tasks.answers import extract_answer
from posttrain.tasks.registry import Problem, TaskOption, register_task

FORMAT_SCORE = 0.1
MAX_ANSWER_CHARS = 100  # longer answers are not plausible for a few numbers; bounds parsing work
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


def evaluate(expression: str) -> tuple[Fraction, list[int]] | None:
    """Exact value and the integer literals of a + - * / expression; None if anything else appears.

    >>> evaluate("(7-3)*5")
    (Fraction(20, 1), [7, 3, 5])
    >>> evaluate("__import__('os')") is None
    True
    """
    if not expression or len(expression) > MAX_ANSWER_CHARS:
        return None
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return None
    literals: list[int] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and type(node.value) is int:
            # Only plain decimal literals: "0x10" or "1_0" are ints to Python, not numbers a reader sees.
            if not (ast.get_source_segment(expression, node) or "").isdigit():
                raise ValueError("non-decimal literal")
            literals.append(node.value)
            return Fraction(node.value)
        raise ValueError(f"disallowed syntax {type(node).__name__}")

    try:
        return walk(tree.body), literals
    except (ValueError, ZeroDivisionError):
        return None


def score(solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict[str, float]:
    """Grade an expression against ``{"numbers": [...], "target": t}``.

    >>> gt = '{"numbers": [3, 5, 7], "target": 22}'
    >>> score("3*5+7<|im_end|>", gt)
    {'score': 1.0, 'acc': 1.0}
    >>> score("3+5+7", gt)  # valid, wrong value
    {'score': 0.1, 'acc': 0.0}
    >>> score("3*5+7+7", gt)  # 7 used twice
    {'score': 0.0, 'acc': 0.0}
    """
    truth = json.loads(ground_truth)
    result = evaluate(extract_answer(solution_str))
    if result is None:
        return {"score": 0.0, "acc": 0.0}
    value, literals = result
    if Counter(literals) - Counter(truth["numbers"]):  # a literal not given, or used too often
        return {"score": 0.0, "acc": 0.0}
    if value == truth["target"]:
        return {"score": 1.0, "acc": 1.0}
    return {"score": FORMAT_SCORE, "acc": 0.0}


def _random_expression(rng: random.Random, numbers: list[int]) -> tuple[str, Fraction] | None:
    """Combine the numbers left to right with random operators; None if a division is inexact."""
    order = rng.sample(numbers, len(numbers))
    text, value, additive = str(order[0]), Fraction(order[0]), False
    for n in order[1:]:
        op = rng.choice("+-*/")
        if op in "*/":
            if op == "/" and (value / n).denominator != 1:
                return None  # keep every intermediate an integer: solutions a reader can check
            text = f"({text}){op}{n}" if additive else f"{text}{op}{n}"
            value = value * n if op == "*" else value / n
            additive = False
        else:
            text, value, additive = f"{text}{op}{n}", value + n if op == "+" else value - n, True
    return text, value


@register_task(
    "countdown",
    description="Reach a target with + - * / over given numbers: '3,5,7->22:' -> '3*5+7'.",
    ability="math",
    score=score,
    options=[
        TaskOption("count", 3, "How many numbers are given."),
        TaskOption("max_number", 10, "Largest given number (numbers are 1..max_number)."),
        TaskOption("max_target", 100, "Largest target (targets are 1..max_target)."),
    ],
)
def generate(rng: random.Random, *, count: int, max_number: int, max_target: int) -> Problem:
    """Draw numbers, then random expressions over them until one lands in 1..max_target."""
    if not 2 <= count <= 6:
        raise ConfigError(f"countdown --count must be between 2 and 6, got {count}")
    if max_number < 1 or max_target < 1:
        raise ConfigError("countdown --max-number and --max-target must be >= 1")
    for _ in range(10_000):
        numbers = [rng.randint(1, max_number) for _ in range(count)]
        found = _random_expression(rng, numbers)
        if found is not None and found[1].denominator == 1 and 1 <= found[1] <= max_target:
            target = int(found[1])
            truth = json.dumps({"numbers": numbers, "target": target})
            prompt = ",".join(map(str, numbers)) + f"->{target}:"
            return Problem(prompt=prompt, ground_truth=truth, response=found[0])
    raise ConfigError(
        f"countdown found no target in 1..{max_target} from {count} numbers up to {max_number}; "
        f"raise --max-target or --max-number"
    )
