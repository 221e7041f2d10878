"""The video_r1 scorer against hand-worked cases of ROLL's VideoR1RewardWorker: the format part, the
accuracy of each question type, and their sum."""

from __future__ import annotations

import pytest

from posttrain.rewards.scorers import load_scorer
from posttrain.rewards.video_r1 import accuracy, format_ok, video_r1_score, word_error_rate


@pytest.mark.parametrize(("response", "expected"), [
    ("<think>let me think</think>\n<answer>B</answer>", 1.0),
    ("<think>a\nb</think><answer>B</answer>", 1.0),
    ("Sure. <think>a</think><answer>B</answer>", 0.0),  # text before the think block
    ("<think>a</think><answer>B</answer> done", 0.0),  # text after the answer
    ("<answer>B</answer>", 0.0),
])
def test_format_is_a_whole_response_match(response, expected):
    assert format_ok(response) == expected


@pytest.mark.parametrize(("response", "truth", "kind", "expected"), [
    ("<answer>\\boxed{C}.</answer>", "<answer>C</answer>", "multiple choice", 1.0),
    ("<answer> B. cats </answer>", "<answer>B</answer>", "multiple choice", 1.0),  # first character only
    ("<answer>D</answer>", "<answer>C</answer>", "multiple choice", 0.0),
    ("<answer>3.141</answer>", "<answer>3.14</answer>", "numerical", 1.0),  # equal at 2 decimals
    ("<answer>3.15</answer>", "<answer>3.14</answer>", "numerical", 0.0),
    ("<answer>3</answer>", "<answer>3.0</answer>", "numerical", 0.0),  # one has a decimal point, the other not
    ("<answer>1,000.5</answer>", "<answer>1000.50</answer>", "numerical", 1.0),
    ("<answer>many</answer>", "<answer>4</answer>", "numerical", 0.0),
    ("<answer>the quick red fox</answer>", "<answer>the quick brown fox</answer>", "OCR", 0.75),  # 1 substitution / 4 words
    ("<answer>the quick brown fox jumps over</answer>", "<answer>the quick brown fox</answer>", "OCR", 0.5),
    ("<answer>a b c d e f g h i</answer>", "<answer>x y</answer>", "OCR", 0.0),  # WER above 1, clipped
    ("<answer>8</answer>", "<answer>10</answer>", "regression", 1 - (2 + 1e-9) / (10 + 1e-9)),
    ("<answer>30</answer>", "<answer>10</answer>", "regression", 0.0),  # relative error 2, clipped to 1
    ("<answer>0</answer>", "<answer>0</answer>", "regression", 0.0),  # (0 + 1e-9) / (0 + 1e-9) = 1, as ROLL computes it
    ("<answer>n/a</answer>", "<answer>10</answer>", "regression", 0.0),  # ROLL fails here; posttrain scores 0
    ("<answer>the cat</answer>", "<answer>the cat sat</answer>", "free-form", (0.8 + 2 / 3 + 0.8) / 3),
    ("<answer>the cat sat</answer>", "<answer>the cat sat</answer>", "free-form", 1.0),
    ("<answer>B</answer>", "<answer>B</answer>", "yes/no", 0.0),  # a type the worker does not know
    ("B", "B", "multiple choice", 1.0),  # no answer tags: the whole text
])
def test_accuracy_by_question_type(response, truth, kind, expected):
    assert accuracy(response, truth, kind) == pytest.approx(expected, abs=1e-12)


def test_free_form_rouge_stems_words():
    # "running" and "runs" both stem to "run" (Porter): every ROUGE part matches
    assert accuracy("<answer>dogs running</answer>", "<answer>dog runs</answer>", "free-form") == pytest.approx(1.0)


def test_word_error_rate_counts_edits_over_reference_words():
    assert word_error_rate("a b c", "a c") == pytest.approx(1 / 3)
    assert word_error_rate("", "a b") == 2.0  # the reference's count is at least 1


def test_the_score_is_accuracy_plus_format_with_the_type_from_extra_info():
    out = video_r1_score("video", "<think>4 legs</think> <answer>4.0</answer>", "<answer>4.0</answer>", {"reward_model": "numerical"})
    assert out == {"score": 2.0, "acc_reward": 1.0, "fmt_reward": 1.0}
    out = video_r1_score("video", "<answer>4</answer>", "<answer>4.0</answer>", {"reward_model": "numerical"})
    assert out == {"score": 0.0, "acc_reward": 0.0, "fmt_reward": 0.0}
    out = video_r1_score("video", "<answer>A</answer>", "<answer>A</answer>", {"kind": "multiple choice"}, type_key="kind")
    assert out["score"] == 1.0
    with pytest.raises(ValueError, match="no 'reward_model' column.*extra_info_keys"):
        video_r1_score("video", "<answer>A</answer>", "A", {})


def test_video_r1_is_a_built_in_scorer():
    scorer = load_scorer("video_r1", {}, "reward.workers.v.worker_cls")
    assert scorer.label == "posttrain.rewards.video_r1:video_r1_score"
