"""PRIME's math answer checks, as Reasoning360's DAPO grader calls them (posttrain.rewards.dapo_math).

Two pieces, both from the PRM800K/Hendrycks MATH line of graders that PRIME collected
(verl.utils.reward_score.prime_math):

- ``mathd_normalize``: Hendrycks' MATH string normalisation (drop ``\\left``/``\\right``, degrees,
  ``\\$``, a trailing ``\\text{ unit}``, spaces; ``tfrac``/``dfrac`` -> ``frac``; ``\\frac12`` ->
  ``\\frac{1}{2}``; ``\\sqrt2`` -> ``\\sqrt{2}``; ``a/b`` of integers -> ``\\frac{a}{b}``; ``0.5`` ->
  ``\\frac{1}{2}``; a short ``k =`` prefix dropped).
- ``math_equal(prediction, reference)``: equal as text (case and spaces aside), else as numbers
  (relative tolerance 1e-4, the reference also taken x100 and /100 as a percentage), else
  element-wise for tuples/intervals with the same brackets or comma lists, else SymPy-equal
  (``simplify(a - b) == 0`` or numerically close).

Deviations, all on the side of safety: ``\\pi`` answers are evaluated as arithmetic only (the source
``eval``s them); SymPy parses with no Python builtins and never a string holding ``__``; SymPy's
LaTeX parser is not tried (it needs antlr4 4.11 exactly, which posttrain does not pin), so a LaTeX
string reaching the symbolic step compares as text; matrix answers are compared by the other steps
only. There is no per-call timeout here: the reward manager's bounds the whole score.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from math import isclose
from typing import Any

_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{7}`` -> ``\\frac{1}{7}``; too short: unchanged."""
    head, *parts = s.split("\\frac")
    out = head
    for part in parts:
        out += "\\frac"
        if not part:  # the source indexes part[0] here and gives up on the whole answer
            raise IndexError(s)
        if part[0] == "{":
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, rest = part[0], part[1], part[2:]
        out += "{" + a + "}{" + b + "}" + rest if b != "{" else "{" + a + "}" + b + rest
    return out


def _fix_a_slash_b(s: str) -> str:
    a, _, b = s.partition("/")
    if "/" in b or not re.fullmatch(r"-?\d+", a) or not re.fullmatch(r"-?\d+", b) or s != f"{int(a)}/{int(b)}":
        return s
    return "\\frac{" + a + "}{" + b + "}"


def _fix_sqrt(s: str) -> str:
    head, *parts = s.split("\\sqrt")
    if not all(parts):  # a trailing \sqrt: the source indexes past it and gives up on the whole answer
        raise IndexError(s)
    return head + "".join("\\sqrt" + (p if p[:1] == "{" else "{" + p[:1] + "}" + p[1:]) for p in parts)


def _strip_string(s: str) -> str:
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"), ("\\left", ""),
                     ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", "")):
        s = s.replace(old, new)
    if "\\text{ " in s:  # a unit after the answer; the source fails (and keeps the input) on two of them
        parts = s.split("\\text{ ")
        if len(parts) != 2:
            raise ValueError(s)
        s = parts[0]
    s = s.replace("\\\\%", "").replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    lhs, eq, rhs = s.partition("=")
    if eq and "=" not in rhs and len(lhs) <= 2:
        s = rhs
    if "\\sqrt" in s:
        s = _fix_sqrt(s)
    s = _fix_fracs(s.replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def mathd_normalize(answer: str) -> str:
    """Hendrycks' MATH normalisation of an answer (module docstring); unchanged where it fails.

    >>> mathd_normalize("\\\\text{x = \\\\dfrac12}"), mathd_normalize(" 3/4 "), mathd_normalize("10^\\\\circ")
    ('\\\\frac{1}{2}', '\\\\frac{3}{4}', '10')
    """
    answer = answer.strip()
    m = re.search(r"^\\text\{(?P<text>.+?)\}$", answer)
    if m is not None:
        answer = m.group("text").strip()
    try:
        return _strip_string(answer)
    except (ValueError, IndexError):
        return answer


def _arith(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        return _ARITH[type(node.op)](_arith(node.left), _arith(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _ARITH:
        return _ARITH[type(node.op)](_arith(node.operand))
    raise ValueError("not arithmetic")


def _with_pi(s: str, pi: float) -> Any:
    """Every ``\\pi`` as ``*pi`` after a digit, else ``1*pi``; then the arithmetic's value if it is
    plain arithmetic, else the rewritten text (the source's eval, kept to arithmetic)."""
    while "\\pi" in s:
        i = s.find("\\pi")
        s = s[:i] + ("*" if i > 0 and s[i - 1].isdigit() else "1*") + f"{pi}" + s[i + 3:]
    try:
        return _arith(ast.parse(s, mode="eval"))
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, TypeError, RecursionError):
        return s


def _prime_normalize(answer: Any, pi: float) -> Any:
    if isinstance(answer, str) and re.match(r"\$\d+(\.\d+)?", answer):
        return answer[1:]
    if isinstance(answer, str) and (re.match(r"^\d+(\.\d+)?%$", answer) or re.match(r"^\d+(\.\d+)?\\%$", answer)):
        return answer.replace("\\%", "").replace("%", "")
    if isinstance(answer, str) and "_" in answer:  # a number in a base (1011_2): its digits; raises on text
        answer = int(float(answer.split("_")[0]))
    if isinstance(answer, str) and "\\pi" in answer:
        answer = _with_pi(answer, pi)
    return answer


def _number(x: Any) -> float | None:
    try:
        return float(str(x).replace("{,}", "") if "{,}" in str(x) else str(x).replace(",", ""))
    except ValueError:
        return None


_INTERVALS = ((r"^Interval\((.*)\)$", "[{}]"), (r"^Interval\.Ropen\((.*)\)$", "[{})"),
              (r"^Interval\.Lopen\((.*)\)$", "({}]"), (r"^Interval\.open\((.*)\)$", "({})"))


def _interval_text(s: str) -> str:
    for pattern, form in _INTERVALS:
        m = re.match(pattern, s)
        if m:
            return form.format(m.group(1))
    return s


def _all_equal(preds: list[str], refs: list[str], tolerance: float) -> bool:
    return len(preds) == len(refs) and all(math_equal(p, r, tolerance=tolerance) for p, r in zip(preds, refs))


def math_equal(prediction: Any, reference: Any, *, include_percentage: bool = True, tolerance: float = 1e-4,
               pi: float = math.pi) -> bool:
    """PRIME's equality of a predicted and a reference answer (module docstring). Raises ValueError
    on an answer with ``_`` that is not a number in a base (the caller scores that wrong).

    >>> math_equal("0.5", "1/2"), math_equal("50", "0.5"), math_equal("(1, 2)", "(1,2.00001)"), math_equal("x+1", "1+x")
    (True, True, True, True)
    >>> math_equal("3", "4"), math_equal("[1, 2]", "(1, 2)")
    (False, False)
    """
    prediction, reference = _prime_normalize(prediction, pi), _prime_normalize(reference, pi)
    if isinstance(prediction, str) and len(prediction) > 1000:
        prediction = prediction[:1000]
    if isinstance(prediction, str) and isinstance(reference, str):
        if prediction.strip().lower() == reference.strip().lower() or prediction.replace(" ", "") == reference.replace(" ", ""):
            return True
    pred_num, ref_num = _number(prediction), _number(reference)
    if pred_num is not None and ref_num is not None:
        scaled = (ref_num / 100, ref_num, ref_num * 100) if include_percentage else (ref_num,)
        return any(isclose(r, pred_num, rel_tol=tolerance) for r in scaled)
    if not prediction and prediction not in (0, False):
        return False
    reference, prediction = str(reference).strip(), _interval_text(str(prediction).strip())
    pred_bare, ref_bare = prediction, reference
    if (prediction[:1] == "[" and prediction[-1:] == "]" and reference[:1] != "(") or (
            prediction[:1] == "(" and prediction[-1:] == ")" and reference[:1] != "["):
        pred_bare, ref_bare = pred_bare.strip("[]()"), ref_bare.strip("[]()")
    if re.sub(r"[{}()]", "", pred_bare) == re.sub(r"[{}()]", "", ref_bare):
        return True
    if (prediction and reference and prediction[0] in "([" and prediction[-1] in ")]"
            and prediction[0] == reference[0] and prediction[-1] == reference[-1]
            and _all_equal(prediction[1:-1].split(","), reference[1:-1].split(","), tolerance)):
        return True
    if "," in prediction and "," in reference:
        preds, refs = [p.strip() for p in prediction.split(",")], [r.strip() for r in reference.split(",")]
        if len(preds) == len(refs):
            return _all_equal(preds, refs, tolerance)
    if (prediction.startswith("Point") and reference[:1] == "(" and reference[-1:] == ")"
            and _all_equal(prediction[prediction.find("(") + 1:-1].split(","), reference[1:-1].split(","), tolerance)):
        return True
    return symbolic_equal(prediction, reference, tolerance)


def sympy_parse(text: str, transformations: Any = None) -> Any:
    """SymPy's reading of ``text`` with no Python builtins (a model's answer is never run as code)."""
    import sympy
    from sympy.parsing import sympy_parser

    if "__" in text:
        raise ValueError("refusing to parse a dunder")
    namespace: dict[str, Any] = {}
    exec("from sympy import *", namespace)  # noqa: S102 - a fixed import, builds SymPy's own namespace
    namespace.update(__builtins__={}, abs=sympy.Abs, min=sympy.Min, max=sympy.Max)
    return sympy_parser.parse_expr(text, global_dict=namespace,
                                   transformations=transformations or sympy_parser.standard_transformations)


def symbolic_equal(a: str, b: str, tolerance: float = 1e-4) -> bool:
    """SymPy-equal: the difference simplifies to 0, or both evaluate to close numbers; a string
    SymPy cannot read stays text (and is then equal to nothing here).

    >>> symbolic_equal("sqrt(8)", "2*sqrt(2)"), symbolic_equal("x**2", "x")
    (True, False)
    """
    import sympy

    def parse(s: str) -> Any:
        try:
            return sympy_parse(s)
        except Exception:  # noqa: BLE001 - any failure to read leaves the text, as in the source
            return s

    x, y = parse(a), parse(b)
    try:
        if sympy.simplify(x - y) == 0:
            return True
    except Exception:  # noqa: BLE001 - text operands, or SymPy failing on the expression
        pass
    try:
        return isclose(sympy.N(x), sympy.N(y), rel_tol=tolerance)
    except Exception:  # noqa: BLE001 - not numbers
        return False
