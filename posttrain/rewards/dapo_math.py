"""The ``dapo_math`` and ``bots_math`` scorers: Reasoning360's naive DAPO math grader, the reward of
Trinity-RFT's ``math_dapo_reward`` and of the BOTS math workflows (arXiv:2503.14476 for DAPO).

    score = 1.0 if the answer grades equal to the truth, else 0.0

- The answer is the content of the last ``\\boxed{}`` (else ``\\fbox{}``, braces matched) in the
  text after the last ``</think>``; with no (or an empty) boxed answer that whole text is the answer.
- Equal (``grade``): equal after Hendrycks' MATH normalisation (posttrain.rewards.prime_equal), or
  after Reasoning360's own (units, ``\\text{}``, LaTeX read as text by pylatexenc, lower case), or
  element by element for tuples/intervals with the same brackets, where two fractions ``a/b`` must
  match as written and any other pair is unequal. (Reasoning360 asks SymPy whether such a pair's
  difference simplifies to 0; Trinity-RFT's copy submits that check, a local function, to a process
  pool, which cannot pickle it, so the check fails and the pair counts unequal. posttrain gives
  Trinity-RFT's scores: SymPy decides only in the fall-back below.)
- Else PRIME's ``math_equal`` (numbers within 1e-4, percentages, tuples, SymPy). For an answer or a
  truth holding ``\\pi``, Trinity-RFT's ``math_dapo_reward`` calls it with a misspelt keyword that
  raises, so there such an answer is wrong unless ``grade`` found it equal (``dapo_math``); BOTS calls
  it properly (``bots_math``, which also has math_boxed's think-tag format penalty:
  ``with_think``, ``format_score_coef``).

The truth is read as text. DAPO's overlong penalty is reward.overlong_buffer, not part of this score.
SymPy runs in-process with no time limit of its own: the reward manager's timeout bounds a score.
"""

from __future__ import annotations

import re
from typing import Any

from pylatexenc import latex2text  # the math extra; imported here so a missing package fails when the scorer loads

from posttrain.rewards.math_boxed import DEFAULT_FORMAT_COEF, think_tags_ok
from posttrain.rewards.prime_equal import math_equal, mathd_normalize
from posttrain.rewards.think_answer import response_text

# Reasoning360's unit words, dropped (with a plural and a power) from an answer before comparing.
_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month", "year",
          "foot", "feet", "inch", "yard", "liter")
_LATEX_SYMBOLS = (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*"))
_TUPLE = "()[]"


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (else ``\\fbox{...}``), braces matched and stripped.

    >>> last_boxed("\\\\boxed{1} then \\\\boxed{\\\\frac{a}{b}} "), last_boxed("no box"), last_boxed("\\\\boxed{3")
    ('\\\\frac{a}{b}', None, None)
    """
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
    if start < 0:
        return None
    depth, left = 0, None
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
            left = i if left is None else left
        elif text[i] == "}":
            depth -= 1
            if depth == 0 and left is not None:
                return text[left + 1:i].strip()
    return None


def extract_answer(response: str) -> str:
    """The answer of a response: the last boxed content after ``</think>``, else that whole text.

    >>> extract_answer("<think>\\\\boxed{1}</think> so \\\\boxed{2}."), extract_answer("<think>x</think>42")
    ('2', '42')
    """
    tail = response.split("</think>")[-1]
    return last_boxed(tail) or tail


def _is_int_text(x: str) -> bool:
    try:
        value = float(_strip_commas(x))
        return abs(value - int(round(value))) <= 1e-7
    except (ValueError, OverflowError):
        return False


def _strip_commas(expr: str) -> str:
    """Thousands separators (1,000,000) out, tuple commas kept."""
    while True:
        out = re.sub(r"(\d)(,)(\d\d\d)($|\D)", r"\1\3\4", expr)
        if out == expr:
            return out
        expr = out


def _latex_text(expr: str) -> str:
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for symbol, name in _LATEX_SYMBOLS:
        expr = expr.replace(symbol, name)
    return expr.strip()


def dapo_normalize(expr: str) -> str:
    """Reasoning360's normalisation: units and ``\\text{}`` out, LaTeX as text, lower case.

    >>> dapo_normalize("\\\\text{5 cm}"), dapo_normalize("\\\\frac{1}{2}"), dapo_normalize("2.0"), dapo_normalize("1,000")
    ('5', '1/2', '2', '1000')
    """
    m = re.search(r"^\\text\{(?P<text>.+?)\}$", expr)
    if m is not None:
        expr = m.group("text")
    for old, new in (("\\%", "%"), ("\\$", "$"), ("$", ""), ("%", ""), (" or ", " , "), (" and ", " , "),
                     ("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12")):
        expr = expr.replace(old, new)
    for unit in _UNITS:
        expr = re.sub(rf"{unit}(es)?(s)? *(\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr[:1] == "{" and expr[-1:] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if _is_float(expr) and _is_int_text(expr):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        try:
            expr = _latex_text(expr)
        except Exception:  # noqa: BLE001 - pylatexenc failing on odd LaTeX leaves it as written, as in the source
            pass
    expr = re.sub(r"([0-9]) +([0-9])", r"\1+\2", re.sub("- *", "-", expr))  # 7 3/4 -> 7+3/4 (a mixed number)
    expr = expr.lower()
    if _is_int_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _is_frac(expr: str) -> bool:
    return bool(re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", expr))


def _split_tuple(expr: str) -> list[str]:
    expr = _strip_commas(expr)
    if not expr:
        return []
    if len(expr) > 2 and expr[0] in _TUPLE and expr[-1] in _TUPLE and not any(c in expr[1:-1] for c in _TUPLE):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def grade(given: str, truth: str) -> bool:
    """Reasoning360's grade_answer (module docstring).

    >>> grade("\\\\frac{1}{2}", "0.5"), grade("2/4", "1/2"), grade("2.0", "2"), grade("(1, 2)", "(1,2)"), grade("x+1", "1+x")
    (True, False, True, True, False)
    """
    if mathd_normalize(truth) == mathd_normalize(given):
        return True
    truth_n, given_n = dapo_normalize(truth), dapo_normalize(given)
    if truth_n == given_n:
        return True
    if not given_n:
        return False
    truth_elems, given_elems = _split_tuple(truth_n), _split_tuple(given_n)
    if len(truth_elems) > 1 and (truth_n[0] != given_n[0] or truth_n[-1] != given_n[-1]):
        return False  # a tuple against another bracket kind
    if len(truth_elems) != len(given_elems):
        return False
    for t, g in zip(truth_elems, given_elems):
        if _is_frac(t) and _is_frac(g):
            same = t == g  # an unreduced fraction is wrong: no SymPy here
        elif _is_int_text(t) != _is_int_text(g):
            same = False  # an integer only matches an integer (2.5 never rounds to 2 or 3 through SymPy)
        else:
            same = False  # Trinity-RFT's SymPy check of the difference, which never succeeds there (module docstring)
        if not same:
            return False
    return True


def dapo_accuracy(response: str, ground_truth: Any, *, pi_fallback: bool) -> float:
    """1.0 when the response's answer grades equal to the truth, else 0.0 (module docstring)."""
    answer, truth = extract_answer(response), str(ground_truth)
    if grade(answer, truth):
        return 1.0
    if ("\\pi" in answer or "\\pi" in truth) and not pi_fallback:
        return 0.0  # Trinity-RFT's math_dapo_reward raises here and scores it wrong
    try:
        return 1.0 if math_equal(answer, truth) else 0.0
    except Exception:  # noqa: BLE001 - e.g. a non-number before "_" (read as a base): wrong, as in the source
        return 0.0


def dapo_math_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict[str, float]:
    """Trinity-RFT's math_dapo_reward accuracy (its overlong part is reward.overlong_buffer).

    >>> dapo_math_score("math", "<think>maybe 3</think> It is \\\\boxed{\\\\dfrac{1}{2}}.<|im_end|>", "0.5")
    {'score': 1.0, 'accuracy': 1.0}
    >>> dapo_math_score("math", "\\\\boxed{2\\\\pi}", "6.283185307179586")["score"]
    0.0
    """
    right = dapo_accuracy(response_text(solution_str), ground_truth, pi_fallback=False)
    return {"score": right, "accuracy": right}


def bots_math_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, *,
                    with_think: bool = False, format_score_coef: float = DEFAULT_FORMAT_COEF) -> dict[str, float]:
    """BOTS's math reward: the DAPO grader with ``\\pi`` answers checked, plus math_boxed's format part.

    >>> bots_math_score("math", "\\\\boxed{2\\\\pi}", "6.283185307179586")
    {'score': 1.0, 'accuracy': 1.0, 'format_score': 0.0}
    >>> bots_math_score("math", "\\\\boxed{7}", "7", with_think=True)["score"]
    0.9
    """
    text = response_text(solution_str)
    right = dapo_accuracy(text, ground_truth, pi_fallback=True)
    layout = -(format_score_coef or DEFAULT_FORMAT_COEF) if with_think and not think_tags_ok(text) else 0.0
    return {"score": right + layout, "accuracy": right, "format_score": layout}
