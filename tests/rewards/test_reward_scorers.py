"""The built-in scorers a reward worker can name: their answers on hand-written responses."""

from __future__ import annotations

import doctest

import pytest

from posttrain.config import load_config
from posttrain.rewards import RewardInput, choice, routing, scorers, types
from posttrain.trainer.rewarding import build_router, reward_function


@pytest.mark.parametrize("module", [choice, routing, scorers, types])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


# (response, ground truth, chosen letter, boxed)
CHOICES = [
    ("\\boxed{B}", "B", "B", True),
    ("<think>maybe \\boxed{A}</think> so \\boxed{C}<|im_end|>", "C", "C", True),  # after the thinking, the last box
    ("The answer is D.", "(D)", "D", False),
    ("I think the ANSWER IS b, i.e. B", "B", "B", False),  # 'answer is' in any case; the first capital after it
    ("Answer: A", "A", "A", False),  # no box, no 'answer is': the first capital of the text
    ("no capital here", "A", None, False),
    ("\\boxed{c}", "C", None, True),  # a lower-case letter is no option
]


@pytest.mark.parametrize("response, truth, letter, boxed", CHOICES)
def test_multiple_choice_extraction(response, truth, letter, boxed):
    assert choice.extract_choice(response) == (letter, boxed)
    assert choice.multiple_choice_score("mc", response, truth)["acc"] == float(letter is not None and letter == truth[-2 if truth.endswith(")") else 0])


@pytest.mark.parametrize("reward_type, expected", [
    (None, [1.0, 0.0, 0.0, 0.0]),
    ("loose", [1.0, 1.0, -1.0, -1.0]),
    ("soft", [1.0, 0.5, -0.5, -1.0]),
    ("strict", [1.0, -1.0, -1.0, -1.0]),
])
def test_reward_type_picks_the_reward_table_of_a_worker(reward_type, expected):
    overrides = ["reward.workers.mc.worker_cls=multiple_choice", "reward.workers.mc.tag_included=[quiz]"]
    if reward_type is not None:
        overrides.append(f"reward.workers.mc.reward_type={reward_type}")
    cfg = load_config(None, overrides)
    router = build_router(cfg, reward_function(cfg))
    # right & boxed, right & unboxed, wrong & boxed, wrong & unboxed
    responses = ["\\boxed{B}", "the answer is B", "\\boxed{A}", "the answer is A"]
    out = router.score([RewardInput("quiz", r, "B", index=i) for i, r in enumerate(responses)])
    assert out.scores == expected
    assert out.extra["format"] == [1.0, 0.0, 1.0, 0.0] and out.extra["acc"] == [1.0, 1.0, 0.0, 0.0]
    router.close()


def test_a_ground_truth_without_an_option_letter_is_a_failure():
    with pytest.raises(ValueError, match="names no option letter"):
        choice.multiple_choice_score("mc", "\\boxed{B}", "42")


# (response, ground truth, equal?): hand-written, one equivalence each
MATH = [
    ("\\boxed{\\frac{1}{2}}", "0.5", True),  # fraction vs decimal
    ("1/2", "\\frac{1}{2}", True),  # plain text vs LaTeX
    ("\\boxed{\\dfrac{3}{4}}", "0.75", True),  # \dfrac
    ("\\boxed{\\frac{2}{6}}", "\\frac{1}{3}", True),  # unreduced fraction
    ("\\boxed{0.333}", "\\frac{1}{3}", False),  # a rounded decimal is not 1/3
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True),  # surds
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", True),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", True),  # polynomial identity
    ("\\boxed{\\sin^2 x + \\cos^2 x}", "1", True),  # trigonometric identity
    ("\\boxed{\\frac{\\pi}{2}}", "\\pi/2", True),
    ("\\boxed{3.14}", "\\pi", False),  # an approximation of pi is not pi
    ("\\boxed{3+4i}", "4i+3", True),  # complex numbers, terms reordered
    ("\\boxed{50\\%}", "0.5", True),  # percent
    ("\\boxed{1,000}", "1000", True),  # thousands separator
    ("\\boxed{2}", "2.0", True),
    ("\\boxed{-7}", "-7", True),
    ("\\boxed{7}", "-7", False),  # sign matters
    ("19<|im_end|>", "19", True),  # a bare number, end marker removed
    ("x=5", "5", True),  # an equation's right-hand side
    ("\\boxed{x=5}", "5", True),
    ("\\boxed{5 \\text{ cm}}", "5", True),  # units dropped
    ("\\boxed{30^\\circ}", "30", True),  # degrees
    ("The answer is $\\boxed{\\{1,2\\}}$", "\\{2,1\\}", True),  # sets are unordered
    ("\\boxed{(1,2)}", "(1,2)", True),  # tuples...
    ("\\boxed{(2,1)}", "(1,2)", False),  # ...are ordered
    ("\\boxed{[0,1)}", "[0,1)", True),  # intervals
    ("\\boxed{[0,1]}", "[0,1)", False),  # a closed end differs
    ("$x \\in (1, 3)$", "(1,3)", True),
    ("\\boxed{\\infty}", "\\infty", True),
    ("\\boxed{12}", "\\boxed{12}", True),  # a boxed ground truth
    ("<think>\\boxed{3}</think> \\boxed{4}", "4", True),  # the answer after the thinking counts
    ("<think>\\boxed{4}</think> \\boxed{3}", "4", False),
    ("no answer here", "4", False),
    ("", "4", False),
]


@pytest.mark.parametrize("response, truth, equal", MATH)
def test_math_equivalence_table(response, truth, equal):
    from posttrain.rewards.math_scorer import math_score

    assert math_score("math", response, truth) == {"score": float(equal), "acc": float(equal)}


def test_math_doctests_and_a_ground_truth_that_is_no_math_is_a_failure():
    from posttrain.rewards import math_scorer

    assert doctest.testmod(math_scorer).failed == 0
    with pytest.raises(ValueError, match="no math expression"):
        math_scorer.math_score("math", "\\boxed{1}", "")
