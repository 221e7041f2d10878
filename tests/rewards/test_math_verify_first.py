"""The math_verify_first scorer gives RM-Gallery's math_verify_reward scores (the reward of Trinity-RFT's
math_rm_workflow): the expected numbers below follow RM-Gallery's MathVerifyReward._evaluate as it reads
(rm_gallery/gallery/rm/math/math.py): both sides stripped, parsed by math-verify with LaTeX then plain
extraction, the first item of each compared, 0 when either parses to nothing."""

from __future__ import annotations

import doctest

import pytest

import posttrain.rewards.math_verify_first as module
from posttrain.rewards.math_scorer import math_score
from posttrain.rewards.math_verify_first import math_verify_first_score
from posttrain.rewards.scorers import load_scorer


def rm_gallery_math_verify(response: str, reference: str) -> float:
    """RM-Gallery's _evaluate, step by step as its source reads (re-written here as the oracle)."""
    from math_verify import parse, verify
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    generated, reference = response.strip(), reference.strip()
    try:
        gold = parse(reference, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()])
        pred = parse(generated, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()])
        return 1.0 if gold and pred and verify(gold[0], pred[0]) else 0.0
    except Exception:  # its timeout_score
        return 0.0


# (response, reference, RM-Gallery's score, posttrain's math scorer's score or the error it raises)
CASES = [
    ("The answer is 12", "12", 1.0, 1.0),
    ("x = 3", "4", 0.0, 0.0),
    ("\\boxed{3}", "\\frac{6}{2}", 1.0, 1.0),                       # a bare LaTeX fraction still reads
    ("It is \\boxed{\\frac{1}{2}}.", "0.5", 1.0, 1.0),
    ("\\boxed{10\\%}", "0.1", 1.0, 1.0),                             # a percentage is its fraction
    ("  \\boxed{5}  ", " 5\n", 1.0, 1.0),                            # both sides stripped
    # the whole response is read, the thinking too
    ("<think>\\boxed{7}</think> I am not sure", "7", 1.0, 0.0),
    ("<think>so 3</think>", "3", 1.0, 0.0),
    ("<think>\\boxed{7}</think> \\boxed{3}", "3", 0.0, 1.0),          # two near boxes read as the set {3, 7}
    # the reference is parsed as written, with no $...$ around it
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 0.0, 1.0),                  # the bare reference reads as 2
    ("\\boxed{1,2}", "1,2", 0.0, 1.0),                               # ... as 1.2
    ("\\boxed{\\pi}", "\\pi", 0.0, 1.0),                              # ... as nothing: every response scores 0
    ("\\boxed{2\\sqrt{2}}", "$\\sqrt{8}$", 1.0, 1.0),                 # a delimited reference reads as meant
    ("\\boxed{3}", "", 0.0, ValueError),                              # no reference: 0, not a failed row
    ("no number at all", "5", 0.0, 0.0),
    ("\\boxed{12}<|im_end|>", "12", 1.0, 1.0),                        # the decoder's end marker is not text
]


@pytest.mark.parametrize("response, reference, score, math", CASES)
def test_scores_are_rm_gallerys(response, reference, score, math):
    assert math_verify_first_score("math", response, reference) == {"score": score, "math_verify": score}
    assert rm_gallery_math_verify(response.replace("<|im_end|>", ""), reference) == score
    if isinstance(math, float):
        assert math_score("math", response, reference)["score"] == math
    else:
        with pytest.raises(math):
            math_score("math", response, reference)


@pytest.mark.parametrize("truth", [12, 0.5, None, ["3"]])
def test_a_ground_truth_that_is_not_text_fails_the_call(truth):
    # RM-Gallery strips the reference before its try-block: a number there raises out of the reward
    with pytest.raises(ValueError, match="not text"):
        math_verify_first_score("math", "\\boxed{12}", truth)


def test_the_parts_name_and_the_built_in():
    assert math_verify_first_score("math", "\\boxed{4}", "4", name="acc") == {"score": 1.0, "acc": 1.0}
    fn = load_scorer("math_verify_first", {"name": "mv"}, "reward.workers.w.worker_cls")
    assert fn("math", "<think>\\boxed{7}</think> hmm", "7") == {"score": 1.0, "mv": 1.0}


def test_the_docstring_examples_hold():
    assert doctest.testmod(module).failed == 0
