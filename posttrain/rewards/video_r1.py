"""The ``video_r1`` scorer: Video-R1's reward, accuracy by question type plus an R1 format bonus.

As ROLL's VideoR1RewardWorker computes it (which follows Video-R1's GRPO reward): the score is
``accuracy + format``, each in [0, 1].

- format: 1 when the whole response is ``<think>...</think>`` then ``<answer>...</answer>`` (only
  whitespace between, nothing before or after), else 0.
- accuracy: the text inside the first ``<answer>...</answer>`` of the response and of the ground
  truth (the whole text when there is none), compared by the row's question type:

  =================  ==========================================================================
  multiple choice    1 when the first character (after stripping spaces and dots) of the last
                     ``\\boxed{...}`` content (else the whole answer) is the same in both
  numerical          0 when one has a decimal point or comma and the other not; else 1 when both
                     read as numbers (commas dropped) equal after rounding to 2 decimals
  OCR                1 - word error rate (word-level edit distance / reference words), clipped to [0, 1]
  free-form          mean F-measure of ROUGE-1, ROUGE-2 and ROUGE-L (Porter-stemmed), clipped
  regression         1 - relative error |out - gt| / |gt| (with 1e-9 added to both), clipped to [0, 1]
  anything else      0
  =================  ==========================================================================

The question type is the row's ``reward_model`` column (ROLL's Video-R1 reader stores the
dataset's problem_type there), which reaches the scorer through ``data.extra_info_keys``;
``type_key`` names another column. One deviation: ROLL's regression branch fails on an answer that
is not a number; here it scores 0, as its numerical branch does.
"""

from __future__ import annotations

import re
from typing import Any

_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_BOXED = re.compile(r"\\boxed{(.*?)}")
_FORMAT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)
QUESTION_TYPES = ("multiple choice", "numerical", "OCR", "free-form", "regression")


def answer_text(text: str) -> str:
    """The stripped inside of the first ``<answer>`` tag, or the whole text without one."""
    found = _ANSWER.search(text)
    return found.group(1).strip() if found else text


def boxed_or_all(text: str) -> str:
    """The content of the last ``\\boxed{...}``, or the text itself."""
    found = _BOXED.findall(text)
    return found[-1] if found else text


def to_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level Levenshtein distance over the reference's word count (at least 1)."""
    ref, hyp = reference.split(), hypothesis.split()
    previous = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        row = [i]
        for j, other in enumerate(hyp, 1):
            row.append(previous[j - 1] if word == other else 1 + min(previous[j], row[j - 1], previous[j - 1]))
        previous = row
    return previous[-1] / max(1, len(ref))


def rouge_mean(reference: str, hypothesis: str) -> float:
    """Mean F-measure of ROUGE-1, ROUGE-2 and ROUGE-L with Porter stemming (the rouge-score package)."""
    from rouge_score import rouge_scorer

    scores = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True).score(reference, hypothesis)
    return (scores["rouge1"].fmeasure + scores["rouge2"].fmeasure + scores["rougeL"].fmeasure) / 3


def accuracy(response: str, truth: str, question_type: str) -> float:
    """The accuracy part (module docstring's table)."""
    out, gt = answer_text(response), answer_text(truth)
    if question_type == "multiple choice":
        return float(boxed_or_all(out).strip().strip(".")[:1] == boxed_or_all(gt).strip().strip(".")[:1])
    if question_type == "free-form":
        return min(1.0, max(0.0, rouge_mean(gt, out)))
    if question_type == "numerical":
        if ("." in gt or "," in gt) != ("." in out or "," in out):
            return 0.0
        a, b = to_number(gt), to_number(out)
        return float(a is not None and b is not None and round(a, 2) == round(b, 2))
    if question_type == "OCR":
        return min(1.0, max(0.0, 1 - word_error_rate(gt, out)))
    if question_type == "regression":
        a, b = to_number(gt), to_number(out)
        if a is None or b is None:
            return 0.0
        return 1 - min(1.0, max(0.0, (abs(b - a) + 1e-9) / (abs(a) + 1e-9)))
    return 0.0


def format_ok(response: str) -> float:
    return float(_FORMAT.fullmatch(response) is not None)


def video_r1_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, type_key: str = "reward_model",
) -> dict[str, float]:
    """accuracy + format of a Video-R1 response (module docstring).

    >>> video_r1_score("v", "<think>hm</think> <answer>B</answer>", "<answer>B</answer>", {"reward_model": "multiple choice"})
    {'score': 2.0, 'acc_reward': 1.0, 'fmt_reward': 1.0}
    """
    question_type = (extra_info or {}).get(type_key)
    if question_type is None:
        raise ValueError(f"video_r1: the row has no {type_key!r} column (its question type: one of {', '.join(QUESTION_TYPES)}); "
                         f"add it to data.extra_info_keys")
    acc, fmt = accuracy(solution_str, str(ground_truth), str(question_type)), format_ok(solution_str)
    return {"score": acc + fmt, "acc_reward": acc, "fmt_reward": fmt}
