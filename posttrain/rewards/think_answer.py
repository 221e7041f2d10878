"""The ``think_answer`` scorer: accuracy plus format for responses written as ``<think>...</think>
<answer>...</answer>`` (the DeepSeek-R1-Zero template, posttrain.config.dialects.prompts.R1_SYSTEM_PROMPT).

    score = accuracy + format_score
    accuracy     = 1.0 if the answer equals the ground truth (math-verify), else 0.0
    format_score = +0.1 if the response is reasoning in <think> tags then the answer in <answer>
                   tags, else -0.1

This is the reward of Trinity-RFT's ``math_workflow`` (its default ``math_reward``), with its values
and its two parts logged as ``reward/accuracy`` and ``reward/format_score``; DeepSeek-R1 (arXiv:
2501.12948, section 2.2.2) trains R1-Zero on the same two rule-based rewards, accuracy and format.

- The answer is the text inside the first ``<answer>...</answer>`` on one line, else the whole
  response; the ground truth is read the same way (a GSM8K answer column ``... #### 72`` is parsed
  whole). Both go through math-verify's ``parse`` with its default extraction (LaTeX and plain
  expressions); ``verify(answer, truth)`` decides, and an error in it counts as wrong.
- The format test: some text, ``<think>``, anything, ``</think>``, blanks, ``<answer>``, anything,
  ``</answer>``, then blanks up to the end of a line (Python's ``re.match`` with DOTALL and MULTILINE).
- The response is read without the end-of-turn marker the decoder keeps (``<|im_end|>``), which the
  source framework's engines drop when they detokenise.

math-verify's own time limits use SIGALRM, which the reward managers' time limit owns; they are off
here, and ``reward.timeout_s`` bounds the call.
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.rewards.math_scorer import parse, verify
from posttrain.tasks.answers import END_MARKERS

FORMAT_BONUS = 0.1  # + when the layout is right, - when it is not
# `.` crosses lines (DOTALL) inside the tags; `$` may be any line end (MULTILINE), so text after
# the answer on later lines still passes.
_LAYOUT = re.compile(r".*?<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL | re.MULTILINE)
_ANSWER = re.compile(r"<answer>(.*?)</answer>")  # one line: `.` does not cross a newline here


def response_text(solution_str: str) -> str:
    """The decoded response without the end-of-turn markers at its end.

    >>> response_text("<answer>4</answer><|im_end|>")
    '<answer>4</answer>'
    """
    text = solution_str
    stripped = True
    while stripped:
        stripped = False
        for marker in END_MARKERS:
            if text.endswith(marker):
                text, stripped = text[: -len(marker)], True
    return text


def tagged_answer(text: str) -> list:
    """math-verify's reading of the first one-line ``<answer>`` block of `text`, else of all of it."""
    found = _ANSWER.search(text)
    return parse(found.group(1) if found else text, parsing_timeout=None)


def format_score(text: str) -> float:
    """+0.1 for reasoning in think tags followed by the answer in answer tags, else -0.1.

    >>> format_score("<think>2+2</think>\\n<answer>4</answer>"), format_score("4")
    (0.1, -0.1)
    """
    return FORMAT_BONUS if _LAYOUT.match(text) else -FORMAT_BONUS


def accuracy(text: str, ground_truth: Any) -> float:
    """1.0 when the tagged answer equals the ground truth for math-verify, else 0.0."""
    answer, truth = tagged_answer(text), tagged_answer(str(ground_truth))
    try:
        return float(verify(answer, truth, timeout_seconds=None))
    except Exception:  # an expression SymPy cannot compare is a wrong answer, as in the source
        return 0.0


def think_answer_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict[str, float]:
    """accuracy + format_score, with both parts.

    >>> think_answer_score("gsm8k", "<think>6*7</think> <answer>42</answer><|im_end|>", "... #### 42")
    {'score': 1.1, 'accuracy': 1.0, 'format_score': 0.1}
    >>> think_answer_score("gsm8k", "It is 41.", "... #### 42")
    {'score': -0.1, 'accuracy': 0.0, 'format_score': -0.1}
    """
    text = response_text(solution_str)
    right, layout = accuracy(text, ground_truth), format_score(text)
    return {"score": right + layout, "accuracy": right, "format_score": layout}
