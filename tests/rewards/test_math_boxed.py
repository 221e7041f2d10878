"""The math_boxed scorer gives the scores of Trinity-RFT's math_boxed_reward: the last boxed answer
against the truth after Qwen2.5-Math's answer cleaning. The expected values were derived by reading
that cleaning step by step (trinity/common/rewards/qwen25_eval.py strip_string, eval_utils.py
compute_score_v0) and include its quirks."""

from __future__ import annotations

import pytest

from posttrain.rewards.answer_cleaning import Unreadable, clean_answer, word_number
from posttrain.rewards.math_boxed import math_boxed_score
from posttrain.rewards.scorers import load_scorer


@pytest.mark.parametrize("raw, clean", [
    ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("\\tfrac12", "\\frac{1}{2}"), ("\\frac1{2}", "\\frac{1}{2}"), ("1/2", "\\frac{1}{2}"),
    ("03/4", "03/4"),                                 # int("03") prints as 3: not the text, left alone
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"), ("\\sqrt2", "\\sqrt{2}"),
    ("5\\text{ cm}", "5"), ("12 inches", "12"), ("3 \\text{ apples}", "3"), ("2 days", "2"),
    ("a=5", "=5"),                                    # "a" is a unit word: removed before "x =" is
    ("x = 3", "3"), ("10\\%", "10\\"), ("50%", "50"),  # "%" goes first, so "\\%" keeps its backslash
    ("$5$", "5"), ("\\$4.50", "4.50"), ("3.00", "3"), (".5", "0.5"),
    ("90^\\circ", "90"), ("45^{\\circ}", "45"), ("\\left(1,2\\right)", "1,2"), ("\\{1,2\\}", "1,2"),
    ("x \\leq 3", "x\\le3"), ("\\mathbf{v}", "v"), ("\\begin{bmatrix}1&2\\end{bmatrix}", "\\begin{pmatrix}1&2\\end{pmatrix}"),
    ("five", "5"), ("two hundred", "200"), ("one point five", "1.5"), ("007", "7"),
    ("two million three thousand", "2004003"),       # the source's word-number reading, as it is
    ("infinity", "\\\\inftyty"), ("inf", "\\infty"),  # "inf" inside the written "\infty" is replaced again
    ("(A)", "A"), ("\\text{(A)}", "A"), ("t", "t"),  # a text that is only a unit word keeps it
    ("", None), (".", None),
])
def test_clean_answer(raw, clean):
    assert clean_answer(raw) == clean


def test_word_numbers_follow_the_source_including_its_failures():
    assert word_number("nineteen") == 19 and word_number("one thousand two hundred") == 1200
    assert word_number("two point x") == 2 and word_number("point") == 0      # a bad decimal part counts 0
    assert word_number("one thousand thousand") is None and word_number("thousand million") is None  # malformed
    with pytest.raises(Unreadable):
        word_number("thousand five")  # nothing before the scale word: the caller compares raw strings


@pytest.mark.parametrize("response, truth, accuracy", [
    ("So the answer is $\\boxed{\\dfrac{1}{2}}$.", "1/2", 1.0),
    ("\\boxed{1} first, then \\boxed{2}", "2", 1.0),                    # the last boxed answer
    ("\\boxed{1} first, then \\boxed{2}", "1", 0.0),
    ("It is \\boxed 12 inches$ long", "12", 1.0),                       # the spaced form, up to the next $
    ("\\fbox{7}", "7", 0.0),                                             # \fbox is found but not read: wrong
    ("\\boxed\n{7}", "7", 0.0),                                          # a mark not followed by { or a space
    ("\\boxed{7", "7", 0.0),                                             # unclosed
    ("The answer is 7.", "7", 0.0),                                      # nothing boxed
    ("\\boxed{five}", "So we get \\boxed{5}.", 1.0),                     # a MATH solution: its boxed answer
    ("\\boxed{5}", 5, 1.0),                                              # a number column reads as its text
    ("\\boxed{thousand five}", "thousand five", 1.0),                   # cleaning fails: raw strings equal
    ("\\boxed{}", "", 1.0),                                              # both clean to nothing
    ("\\boxed{7}<|im_end|>", "7", 1.0),                                  # the kept end-of-turn marker is not text
])
def test_boxed_accuracy(response, truth, accuracy):
    assert math_boxed_score("math", response, truth) == {"score": accuracy, "accuracy": accuracy, "format_score": 0.0}


def test_the_think_format_penalty_and_its_coefficient():
    ok, bad = "<think>2+3</think> \\boxed{5}", "</think> \\boxed{5} <think>"
    assert math_boxed_score("m", ok, "5", with_think=True) == {"score": 1.0, "accuracy": 1.0, "format_score": 0.0}
    assert math_boxed_score("m", bad, "5", with_think=True, format_score_coef=0.5)["format_score"] == -0.5
    assert math_boxed_score("m", bad, "5", with_think=True, format_score_coef=0)["format_score"] == -0.1  # 0 reads as 0.1
    assert math_boxed_score("m", bad, "5")["format_score"] == 0.0  # with_think off: no format part


def test_math_boxed_is_a_built_in_scorer_taking_its_arguments():
    scorer = load_scorer("math_boxed", {"with_think": True, "format_score_coef": 0.2}, "reward.custom_reward_function.name")
    assert scorer("math", "\\boxed{4}", "4", {}) == {"score": 0.8, "accuracy": 1.0, "format_score": -0.2}
