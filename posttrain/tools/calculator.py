"""`calculator`: arithmetic on integers and decimals, parsed by hand (never `eval`).

Grammar (usual precedence, ``**`` binds tightest and to the right, unary minus below it as in
Python)::

    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '/' | '//' | '%') unary)*
    unary  := ('+' | '-') unary | power
    power  := atom ('**' unary)?
    atom   := NUMBER | '(' expr ')'

Bounds keep a model's call cheap: at most 200 characters, exponents up to 64 in magnitude, results up
to 10**100. Integers stay exact (``347*829`` is ``287663``); ``/`` gives a decimal, printed with 12
significant digits, and a whole decimal prints as an integer (``6/3`` is ``2``).

>>> evaluate("347*829")
'287663'
>>> evaluate("-(2+3)**2 / 4")
'-6.25'
>>> evaluate("2**3**2")
'512'
>>> evaluate("1/0")
Traceback (most recent call last):
...
ValueError: division by zero
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.tools.base import function_schema, register_tool

MAX_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**100
_TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(\*\*|//|[-+*/%()]))")


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        found = _TOKEN.match(text, pos)
        if found is None:
            raise ValueError(f"unexpected character {text[pos:].lstrip()[:1]!r} at position {pos}; "
                             "use digits, + - * / // % ** and parentheses")
        out.append(found.group(1) or found.group(2))
        pos = found.end()
    return out


class _Parser:
    def __init__(self, tokens: list[str]):
        self.tokens, self.pos = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ValueError("the expression ends too early")
        self.pos += 1
        return token

    def expr(self) -> int | float:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = _check(value + self.term() if self.take() == "+" else value - self.term())
        return value

    def term(self) -> int | float:
        value = self.unary()
        while self.peek() in ("*", "/", "//", "%"):
            op, right = self.take(), self.unary()
            if op != "*" and right == 0:
                raise ValueError("division by zero")
            value = _check(value * right if op == "*" else value / right if op == "/" else value // right if op == "//" else value % right)
        return value

    def unary(self) -> int | float:
        if self.peek() in ("+", "-"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def power(self) -> int | float:
        base = self.atom()
        if self.peek() != "**":
            return base
        self.take()
        exponent = self.unary()  # right-associative: 2**3**2 is 2**9
        if abs(exponent) > MAX_EXPONENT:
            raise ValueError(f"exponent {exponent} is beyond +-{MAX_EXPONENT}")
        if base == 0 and exponent < 0:
            raise ValueError("division by zero")
        return _check(base**exponent)

    def atom(self) -> int | float:
        token = self.take()
        if token == "(":
            value = self.expr()
            if self.peek() != ")":
                raise ValueError("a '(' is not closed")
            self.take()
            return value
        if token[0].isdigit() or token[0] == ".":
            return float(token) if "." in token else int(token)
        raise ValueError(f"expected a number or '(', got {token!r}")


def _check(value: Any) -> int | float:
    if isinstance(value, complex):
        raise ValueError("the result is not a real number")
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError("the result is beyond 1e100")
    return value


def evaluate(expression: str) -> str:
    """The value of `expression` as text (module docstring); ValueError says what is wrong."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError("expression must be a non-empty string")
    if len(expression) > MAX_CHARS:
        raise ValueError(f"expression longer than {MAX_CHARS} characters")
    parser = _Parser(_tokens(expression))
    value = parser.expr()
    if parser.peek() is not None:
        raise ValueError(f"unexpected {parser.peek()!r} after a complete expression")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("the result is not a finite number")
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.12g}"
    return str(value)


@register_tool("calculator")
class Calculator:
    """The calculator tool: ``{"expression": "347*829"}`` -> ``"287663"``."""

    schema = function_schema(
        "calculator", "Evaluate an arithmetic expression: + - * / // % ** and parentheses.",
        {"expression": {"type": "string", "description": "e.g. 347*829"}}, ["expression"],
    )

    def execute(self, arguments: dict[str, Any]) -> str:
        return evaluate(arguments.get("expression"))
