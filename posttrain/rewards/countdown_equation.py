"""The ``countdown_equation`` scorer: TinyZero's Countdown reward (Pan et al. 2025, TinyZero), the
reward of Trinity-RFT's ``countdown_reward``.

The ground truth is a JSON object (or its text) ``{"target": 24, "numbers": [2, 3, 4]}``; the
response ends with an equation in answer tags, ``<answer>(4 - 2) * 3 * 4</answer>``:

    score = 0    no <answer>...</answer> on the response's last line
            0.1  an equation, but it does not use every number exactly once, or does not
                 evaluate to the target (within 1e-5)
            1.0  it uses every number exactly once and equals the target

- Only the last line is read, and the last answer block on it.
- "Every number exactly once": the runs of digits in the equation, sorted, are the numbers, sorted.
- The equation may hold digits, ``+ - * / ( ) .`` and blanks, and is evaluated as Python would (so
  ``**`` and ``//`` are powers and floor division); anything else, or an error such as a division by
  zero, is an equation that does not reach the target. The evaluation walks the syntax tree itself
  instead of calling ``eval``.

posttrain's own ``posttrain/countdown`` task (posttrain.tasks.countdown) differs: it reads its answer
after ``Answer:`` and lets a number go unused.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from typing import Any, Callable

from posttrain.rewards.think_answer import response_text

FORMAT_SCORE, RIGHT_SCORE = 0.1, 1.0
_ANSWER = re.compile(r"<answer>(.*?)</answer>")
_ALLOWED = re.compile(r"^[\d+\-*/().\s]+$")
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 10_000  # a larger power is never a Countdown target; it would only cost time


def equation(text: str) -> str | None:
    """The last answer block of the text's last line, stripped.

    >>> equation("I try.\\n<answer> 3*8 </answer>"), equation("<answer>3*8</answer>\\nso")
    ('3*8', None)
    """
    found = _ANSWER.findall(text.split("\n")[-1])
    return found[-1].strip() if found else None


def uses_each_number_once(eq: str, numbers: list[int]) -> bool:
    """Whether the equation's digit runs are exactly the given numbers."""
    return sorted(int(n) for n in re.findall(r"\d+", eq)) == sorted(numbers)


def evaluate(eq: str) -> float | int | None:
    """The equation's value as Python computes it, or None when it is not plain arithmetic or fails.

    >>> evaluate("(4 - 2) * 3 * 4"), evaluate("7 // 2"), evaluate("1 / 0"), evaluate("abs(3)")
    (24, 3, None, None)
    """
    if not _ALLOWED.match(eq):
        return None
    try:
        return _value(ast.parse(eq.strip(), mode="eval").body)
    except (SyntaxError, ArithmeticError, ValueError, TypeError):
        return None


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT and abs(left) not in (0, 1):
            raise ValueError("power too large to be a target")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"not arithmetic: {type(node).__name__}")


def countdown_equation_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict[str, float]:
    """0, 0.1 or 1.0 as the module docstring says.

    >>> truth = '{"target": 24, "numbers": [2, 3, 4, 4]}'
    >>> [countdown_equation_score("cd", r, truth)["score"] for r in
    ...  ("<answer>(4 - 2) * 3 * 4</answer>", "<answer>2*3*4*4</answer>", "<answer>3*4*2</answer>", "24")]
    [1.0, 0.1, 0.1, 0.0]
    """
    truth = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    target, numbers = truth["target"], truth["numbers"]
    eq = equation(response_text(solution_str))
    if eq is None:
        return {"score": 0.0}
    if not uses_each_number_once(eq, list(numbers)):
        return {"score": FORMAT_SCORE}
    value = evaluate(eq)
    right = value is not None and abs(value - target) < 1e-5
    return {"score": RIGHT_SCORE if right else FORMAT_SCORE}
