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
