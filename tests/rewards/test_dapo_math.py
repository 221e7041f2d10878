"""The dapo_math and bots_math scorers give the scores of Trinity-RFT's math_dapo_reward and BOTS's
reward (Reasoning360's naive DAPO grader); every expected value below was checked against Trinity-RFT's
own functions run on the same strings during development."""

import pytest

from posttrain.rewards.dapo_math import bots_math_score, dapo_math_score, extract_answer, grade
from posttrain.rewards.prime_equal import math_equal, mathd_normalize
from posttrain.rewards.scorers import load_scorer


@pytest.mark.parametrize("response, truth, dapo, bots", [
    ("\\boxed{1/2}", "0.5", 1.0, 1.0),                        # a fraction against its decimal (MATH normalisation)
    ("\\boxed{2/4}", "1/2", 1.0, 1.0),                        # unreduced: not by grade, but by math_equal's SymPy
    ("\\boxed{50}", "0.5", 1.0, 1.0),                         # math_equal takes the truth x100 as a percentage
    ("\\boxed{3}", "3.0001", 1.0, 1.0),                       # within the relative tolerance 1e-4
    ("\\boxed{0.333}", "1/3", 0.0, 0.0),                      # outside it
    ("\\boxed{\\dfrac{3}{4}}", "0.75", 0.0, 0.0),             # LaTeX fraction against a decimal: no check takes it
    ("The answer is 42", "42", 0.0, 0.0),                     # no boxed answer: the whole text is the answer
    ("<think>\\boxed{7}</think>\\boxed{8}", "7", 0.0, 0.0),   # only the text after </think> counts
    ("<think>\\boxed{7}</think>so 7", "7", 0.0, 0.0),
    ("\\boxed{[1, 2]}", "(1,2)", 0.0, 0.0),                   # other brackets
    ("\\boxed{(1, 2)}", "(1,2)", 1.0, 1.0),
    ("\\boxed{2\\pi}", "6.283185307179586", 0.0, 1.0),        # pi: only BOTS reaches math_equal
    ("\\boxed{\\pi/2}", "\\frac{\\pi}{2}", 1.0, 1.0),         # pi, but equal after normalisation
    ("\\boxed{5 \\text{ cm}}", "5", 1.0, 1.0),                # units dropped
    ("\\boxed{1,000}", "1000", 1.0, 1.0),
    ("\\boxed{1011_2}", "11", 0.0, 0.0),                      # a base-2 answer read as its digits 1011
    ("\\boxed{abc_2}", "x", 0.0, 0.0),                        # the base reading fails: wrong, not an error
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 0.0, 0.0),               # Trinity's SymPy step in grade never succeeds
    ("\\boxed{}", "1", 0.0, 0.0),
    ("\\fbox{4}<|im_end|>", "4", 1.0, 1.0),
])
def test_scores_are_trinity_rfts(response, truth, dapo, bots):
    assert dapo_math_score("math", response, truth) == {"score": dapo, "accuracy": dapo}
    assert bots_math_score("math", response, truth)["score"] == bots


def test_answer_extraction_and_grade_steps():
    assert extract_answer("x</think>a \\boxed{\\frac{1}{\\sqrt{2}}} b") == "\\frac{1}{\\sqrt{2}}"
    assert extract_answer("</think>\\boxed{}tail") == "\\boxed{}tail"  # an empty box: the whole text
    assert mathd_normalize("\\left( 1, \\dfrac12 \\right)") == "(1,\\frac{1}{2})"
    assert grade("2/4", "1/2") is False and grade("2.0", "2") is True
    assert math_equal("[0, 1)", "Interval.Ropen(0, 1)") is False and math_equal("Interval.Ropen(0, 1)", "[0, 1)") is True


def test_bots_format_part_and_scorer_loading():
    bad = "\\boxed{5}"
    assert bots_math_score("m", bad, "5", with_think=True, format_score_coef=0.5) == {"score": 0.5, "accuracy": 1.0, "format_score": -0.5}
    assert bots_math_score("m", "<think>t</think>\\boxed{5}", "5", with_think=True)["format_score"] == 0.0
    assert load_scorer("dapo_math", {}, "reward.custom_reward_function.name")("m", "\\boxed{9}", 9)["score"] == 1.0
    assert load_scorer("bots_math", {"with_think": True}, "w")("m", "\\boxed{9}", "9")["score"] == pytest.approx(0.9)
