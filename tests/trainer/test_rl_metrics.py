"""Step and validation metrics on hand-made examples."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.records import RolloutBatch
from posttrain.trainer.metrics import PhaseTimer, batch_metrics, validation_metrics


def test_validation_metrics_per_data_source():
    # Source "math": two prompts x 3 responses. Source "code": two prompts x 1 response.
    sources = ["math"] * 6 + ["code"] * 2
    groups = ["p1", "p1", "p1", "p2", "p2", "p2", "p3", "p4"]
    scores = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    # p1: majority answer "x" scores 1; p2: majority "v" whose first occurrence scores 0.
    answers = ["x", "y", "x", "u", "v", "v", "a", "b"]
    acc = [1.0, 0.0, 1.0, 0.0, float("nan"), 1.0, 1.0, 0.0]
    m = validation_metrics(sources, groups, scores, answers, {"acc": acc})
    assert m["val/math/score/mean@3"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert m["val/math/score/best@3"] == pytest.approx(1.0)
    assert m["val/math/score/maj@3"] == pytest.approx(0.5)
    assert m["val/code/score/mean@1"] == pytest.approx(0.5)
    assert "val/code/score/best@1" not in m and "val/code/score/maj@1" not in m  # n = 1: no best/maj
    assert m["val/math/acc/mean@3"] == pytest.approx(3 / 5)  # the NaN is skipped
    assert m["val/code/acc/mean@1"] == pytest.approx(0.5)
    assert m["val/score/mean"] == pytest.approx((2 / 3 + 1 / 3 + 1 + 0) / 4)


def test_majority_vote_tie_goes_to_the_first_answer():
    m = validation_metrics(["d"] * 2, ["p", "p"], [0.0, 1.0], ["y", "x"], {})
    assert m["val/d/score/maj@2"] == 0.0 and m["val/d/score/best@2"] == 1.0


def rollout(lengths, T=4):
    B = len(lengths)
    mask = (torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float()  # (B, T)
    prompt_mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 1.0]])[:B]
    return RolloutBatch(
        prompt_ids=torch.ones(B, 3, dtype=torch.long), prompt_mask=prompt_mask,
        response_ids=torch.ones(B, T, dtype=torch.long), response_mask=mask, rollout_logprobs=torch.zeros(B, T),
        weights_version=torch.zeros(B, dtype=torch.long), group_index=["g"] * B, data_source=["d"] * B,
        ground_truth=[None] * B, extra_info=[{} for _ in range(B)], raw_prompt=[""] * B,
    )


def test_batch_metrics_lengths_clip_ratio_and_rewards():
    b = rollout([4, 1, 2])
    scores = torch.tensor([1.0, 0.0, 0.5])
    b.token_level_rewards = torch.zeros(3, 4)
    b.token_level_rewards[0, 3], b.token_level_rewards[2, 1] = 1.0, 0.5
    b.advantages = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-2.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    b.returns = b.advantages.clone()
    b.old_logprobs = -b.response_mask
    b.ref_logprobs = -2 * b.response_mask
    m = batch_metrics(b, scores, max_new_tokens=4)
    assert m["response_length/mean"] == pytest.approx(7 / 3)
    assert (m["response_length/max"], m["response_length/min"]) == (4.0, 1.0)
    assert m["response_length/clip_ratio"] == pytest.approx(1 / 3)  # only the row that hit 4 tokens
    assert m["prompt_length/mean"] == pytest.approx(2.0)
    assert m["critic/score/mean"] == pytest.approx(0.5) and m["critic/score/max"] == 1.0
    assert m["critic/rewards/mean"] == pytest.approx(0.5)
    assert m["critic/advantages/min"] == -2.0 and m["critic/advantages/max"] == 1.0
    assert m["critic/advantages/mean"] == pytest.approx((4 - 2 + 1) / 7)  # over valid tokens only
    assert m["actor/ref_kl"] == pytest.approx(1.0)
    assert "critic/values/mean" not in m
    assert batch_metrics(b, scores, max_new_tokens=2)["response_length/clip_ratio"] == pytest.approx(2 / 3)


def test_phase_timer_accumulates_per_phase():
    timer = PhaseTimer()
    for _ in range(2):
        with timer("gen"):
            pass
    m = timer.metrics()
    assert set(m) == {"timing/gen_s", "timing/step_s"}
    assert 0 <= m["timing/gen_s"] <= m["timing/step_s"] and math.isfinite(m["timing/step_s"])
