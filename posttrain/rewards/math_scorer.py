"""The ``math`` scorer: is the response's final answer mathematically equal to the ground truth?

Equality is symbolic, through the math-verify package (answers parsed from LaTeX or plain text into
SymPy and compared): ``\\frac{1}{2}``, ``0.5`` and ``1/2`` are one answer, as are ``2\\sqrt{2}`` and
``\\sqrt{8}``, or the sets ``{1, 2}`` and ``{2, 1}``. The response's answer is the last
``\\boxed{...}`` when there is one, else the last expression math-verify finds, read after the last
``</think>`` with the end-of-turn markers removed. The ground truth is read as LaTeX (``$...$`` is
added when it has no delimiters of its own).

math-verify's own time limits use SIGALRM, which the reward managers' time limit owns; they are
turned off here, and ``reward.timeout_s`` bounds the call instead. ROLL's math rule worker uses the
same package; its repetition and format penalties are not part of this scorer.
"""

from __future__ import annotations

from typing import Any

from posttrain.errors import ConfigError
from posttrain.tasks.answers import END_MARKERS

try:
    from math_verify import parse, verify
except ImportError as exc:  # the scorer names the extra that installs it, before training starts
    raise ConfigError(f"the math scorer needs the math-verify package ({exc}); install it with: pip install 'posttrain[math]'") from exc


def answer_text(response: str) -> str:
    """The part of a response that holds its answer: after the thinking, without end markers.

    >>> answer_text("<think>2+2</think>So \\\\boxed{4}<|im_end|>")
    'So \\\\boxed{4}'
    """
    text = response.rpartition("</think>")[2] if "</think>" in response else response
    for marker in END_MARKERS:
        text = text.replace(marker, "")
    return text.strip()


def parse_gold(ground_truth: Any) -> list:
    """The ground truth parsed by math-verify (a ValueError when nothing parses: a bad row, which the
    reward manager counts as a failure)."""
    text = str(ground_truth).strip()
    if "$" not in text and "\\boxed" not in text and "\\(" not in text:
        text = f"${text}$"  # a bare answer is LaTeX math
    gold = parse(text, parsing_timeout=None)
    if not gold:
        raise ValueError(f"the ground truth {ground_truth!r} is no math expression math-verify can read")
    return gold


def math_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict[str, float]:
    """1.0 when the response's answer equals the ground truth symbolically, else 0.0.

    >>> math_score("math", "The answer is \\\\boxed{\\\\frac{1}{2}}", "0.5")
    {'score': 1.0, 'acc': 1.0}
    >>> math_score("math", "x = 3", "4")
    {'score': 0.0, 'acc': 0.0}
    """
    gold = parse_gold(ground_truth)
    pred = parse(answer_text(solution_str), parsing_timeout=None)
    right = bool(pred) and verify(gold, pred, timeout_seconds=None)
    return {"score": float(right), "acc": float(right)}
