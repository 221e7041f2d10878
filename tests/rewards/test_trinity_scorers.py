"""The think_answer and countdown_equation scorers give the scores of Trinity-RFT's math_reward
(MathRewardFn: accuracy + format) and countdown_reward (TinyZero's Countdown reward), on
hand-written responses."""

from __future__ import annotations

import pytest

from posttrain.rewards.countdown_equation import countdown_equation_score
from posttrain.rewards.scorers import load_scorer
from posttrain.rewards.think_answer import think_answer_score

GSM8K = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nAltogether 48+24 = <<48+24=72>>72 clips.\n#### 72"


@pytest.mark.parametrize("response, truth, accuracy, layout", [
    ("<think>48 + 24</think>\n<answer>72</answer>", GSM8K, 1.0, 0.1),          # right, well laid out
    ("<think>\n48 + 24\n</think> <answer>72</answer>\nDone.", GSM8K, 1.0, 0.1),  # text on a later line still passes
    ("<think>48 + 24</think><answer>70</answer>", GSM8K, 0.0, 0.1),            # wrong answer, right layout
    ("<answer>72</answer>", GSM8K, 1.0, -0.1),                                  # no reasoning block
    ("<think>a</think><answer>72</answer> clips", GSM8K, 1.0, -0.1),            # text after the answer on its line
    ("So she sold 72 clips.", GSM8K, 1.0, -0.1),                                # no tags: the whole response is read
    ("<think>half</think><answer>\\frac{1}{2}</answer>", "0.5", 1.0, 0.1),      # symbolic equality
    ("<think>x</think><answer>\n3\n</answer>", "4", 0.0, 0.1),                 # a multi-line answer block: read whole
    ("<think>x</think><answer>72</answer><|im_end|>", "72", 1.0, 0.1),          # the kept end-of-turn marker is not text
])
def test_think_answer_adds_accuracy_and_format(response, truth, accuracy, layout):
    assert think_answer_score("gsm8k", response, truth) == {"score": accuracy + layout, "accuracy": accuracy, "format_score": layout}


@pytest.mark.parametrize("response, score", [
    ("Let me try.\n<answer>(4 - 2) * 3 * 4</answer>", 1.0),   # every number once, equals 24
    ("<answer>4 * 3 * 2 * 4 / 4</answer>", 0.1),               # a number twice
    ("<answer>4 + 4 + 3 + 2</answer>", 0.1),                   # numbers right, value 13
    ("<answer>4 // 2 * 3 * 4</answer>", 1.0),                   # Python's floor division, as evaluated there
    ("<answer>4 / (2 - 2) * 3 * 4</answer>", 0.1),             # division by zero: does not reach the target
    ("<answer>abs(4) * 2 * 3 * 4</answer>", 0.1),              # not plain arithmetic
    ("<answer>(4 - 2) * 3 * 4</answer>\nThat is all.", 0.0),   # the answer is not on the last line
    ("24", 0.0),                                                # no answer block
    ("<answer>1</answer> or <answer>(4-2)*3*4</answer><|endoftext|>", 1.0),  # the last block of the line
])
def test_countdown_equation_scores(response, score):
    truth = '{"target": 24, "numbers": [4, 2, 3, 4]}'
    assert countdown_equation_score("countdown", response, truth) == {"score": score}
    assert countdown_equation_score("countdown", response, {"target": 24, "numbers": [4, 2, 3, 4]}) == {"score": score}


def test_the_scorers_are_built_ins_by_name():
    assert load_scorer("think_answer", {}, "k")("", "<answer>2</answer>", "2") == {"score": 0.9, "accuracy": 1.0, "format_score": -0.1}
    assert load_scorer("countdown_equation", {}, "k")("", "<answer>1+2</answer>", '{"target": 3, "numbers": [1, 2]}') == {"score": 1.0}


def test_the_docstring_examples_hold():
    import doctest

    import posttrain.rewards.countdown_equation as countdown
    import posttrain.rewards.think_answer as think

    for module in (think, countdown):
        assert doctest.testmod(module).failed == 0, module.__name__
