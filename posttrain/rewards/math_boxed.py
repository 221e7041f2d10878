"""The ``math_boxed`` scorer: the last ``\\boxed{}`` answer compared with the truth as cleaned strings,
plus an optional format penalty. The reward of Trinity-RFT's ``math_boxed_workflow`` (its
``math_boxed_reward``), with its values:

    score        = accuracy + format_score
    accuracy     = 1.0 if clean(last boxed answer) == clean(truth), else 0.0
    format_score = -format_score_coef if with_think and the response does not hold exactly one
                   <think> before exactly one </think>, else 0.0

- The answer is the last ``\\boxed{...}`` (braces matched) of the response; a response with
  ``\\boxed `` (a space, no braces) takes the text after the last such mark up to the next ``$``.
  No boxed answer, an ``\\fbox`` or a ``\\boxed`` followed by anything else is wrong (0.0). The
  truth is read the same way when it holds a boxed answer (a MATH solution), else taken whole.
- Both go through Qwen2.5-Math's answer cleaning (posttrain.rewards.answer_cleaning.clean_answer)
  and must then be equal strings; where the cleaning fails the raw strings are compared.
- ``format_score_coef`` of 0 counts as 0.1, as in the source (it reads ``coef or 0.1``).
- The truth is read as text: a number column scores like its digits (Trinity-RFT's function fails
  on a non-text truth and scores 0). The response is read without the end-of-turn marker the
  decoder keeps (posttrain.rewards.think_answer.response_text).

The score's parts are logged as ``reward/accuracy`` and ``reward/format_score``.
"""

from __future__ import annotations

from typing import Any

from posttrain.rewards.answer_cleaning import Unreadable, clean_answer
from posttrain.tasks.answers import last_boxed
from posttrain.rewards.think_answer import response_text

DEFAULT_FORMAT_COEF = 0.1


class _NotBoxed(Exception):
    """A boxed mark that is not ``\\boxed{...}`` or ``\\boxed ...``: scored wrong, as in the source."""


def unboxed(boxed: str) -> str:
    """The content of `last_boxed`'s result; `_NotBoxed` for an ``\\fbox`` or a bare ``\\boxed``."""
    if boxed.startswith("\\boxed "):
        return boxed[len("\\boxed "):]
    if not boxed.startswith("\\boxed{"):
        raise _NotBoxed(boxed)
    return boxed[len("\\boxed{"):-1]


def same_answer(answer: str, truth: str) -> bool:
    """Equal after cleaning (two answers that clean to nothing are equal); raw equality where the
    cleaning fails.

    >>> same_answer("\\\\dfrac{3}{4}", "3/4"), same_answer("10%", "10"), same_answer("2", "3")
    (True, True, False)
    """
    try:
        return clean_answer(answer) == clean_answer(truth)
    except Unreadable:
        return answer == truth


def boxed_accuracy(text: str, ground_truth: Any) -> float:
    """1.0 when the last boxed answer of `text` equals the truth after cleaning, else 0.0."""
    truth = str(ground_truth)
    found = last_boxed(text)
    if found is None:
        return 0.0
    try:
        answer = unboxed(found)
        truth_boxed = last_boxed(truth)
        if truth_boxed is not None:
            truth = unboxed(truth_boxed)
    except _NotBoxed:
        return 0.0
    return 1.0 if same_answer(answer, truth) else 0.0


def think_tags_ok(text: str) -> bool:
    """Exactly one ``<think>`` and one ``</think>``, in that order.

    >>> think_tags_ok("<think>a</think> b"), think_tags_ok("b</think>")
    (True, False)
    """
    return text.count("<think>") == 1 and text.count("</think>") == 1 and text.find("<think>") < text.find("</think>")


def math_boxed_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, *,
                     with_think: bool = False, format_score_coef: float = DEFAULT_FORMAT_COEF) -> dict[str, float]:
    """accuracy + format_score, with both parts (module docstring).

    >>> math_boxed_score("math", "So \\\\boxed{\\\\dfrac{1}{2}}.<|im_end|>", "1/2")
    {'score': 1.0, 'accuracy': 1.0, 'format_score': 0.0}
    >>> math_boxed_score("math", "It is \\\\boxed{5}", "5", with_think=True)
    {'score': 0.9, 'accuracy': 1.0, 'format_score': -0.1}
    """
    text = response_text(solution_str)
    right = boxed_accuracy(text, ground_truth)
    layout = -(format_score_coef or DEFAULT_FORMAT_COEF) if with_think and not think_tags_ok(text) else 0.0
    return {"score": right + layout, "accuracy": right, "format_score": layout}
