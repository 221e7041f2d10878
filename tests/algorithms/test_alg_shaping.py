import math

import pytest
import torch

from posttrain.algorithms import (
    RunningMoments,
    apply_kl_penalty,
    clip_advantages,
    clip_rewards,
    normalize_rewards,
    pf_ppo_resample,
    pf_ppo_weights,
    sample_loss_weights,
    scores_to_token_rewards,
    whiten,
)


def test_clip_rewards_and_advantages_report_fraction():
    out = clip_rewards(torch.tensor([-3.0, 0.5, 2.0, 1.0]), 1.0)
    torch.testing.assert_close(out.values, torch.tensor([-1.0, 0.5, 1.0, 1.0]))
    assert out.clip_frac == 0.5
    assert clip_advantages(torch.tensor([[0.1, -0.2]]), 5.0).clip_frac == 0.0
    with pytest.raises(ValueError, match="> 0"):
        clip_rewards(torch.ones(2), 0.0)


def test_normalize_rewards_batch_group_and_shift_scale():
    s = torch.tensor([1.0, 0.0, 0.0, 3.0])
    # batch: mean 1, unbiased std sqrt((0 + 1 + 1 + 4) / 3) = sqrt(2)
    out = normalize_rewards(s, "batch", "batch")
    torch.testing.assert_close(out, (s - 1.0) / (math.sqrt(2.0) + 1e-6))
    torch.testing.assert_close(normalize_rewards(s, "batch", None), s - 1.0)  # reward_shift
    torch.testing.assert_close(normalize_rewards(s, None, "batch"), s / (math.sqrt(2.0) + 1e-6))  # reward_scale
    # group: [1, 0] mean .5 std sqrt(.5); [0, 3] mean 1.5 std sqrt(4.5)
    out = normalize_rewards(s, "group", "group", group_index=[0, 0, 1, 1])
    e = torch.tensor([0.5 / (math.sqrt(0.5) + 1e-6), -0.5 / (math.sqrt(0.5) + 1e-6),
                      -1.5 / (math.sqrt(4.5) + 1e-6), 1.5 / (math.sqrt(4.5) + 1e-6)])
    torch.testing.assert_close(out, e)
    with pytest.raises(ValueError, match="mean_type"):
        normalize_rewards(s, "prompt", None)


def test_running_normalisation_and_state_roundtrip():
    running = RunningMoments()
    out = normalize_rewards(torch.tensor([1.0, 3.0]), "running", "running", running=running)
    # first batch sets the moments: mean 2, unbiased std sqrt(2)
    torch.testing.assert_close(out, torch.tensor([-1.0, 1.0]) / (math.sqrt(2.0) + 1e-6))
    running.update(torch.tensor([5.0, 7.0]))
    all_vals = torch.tensor([1.0, 3.0, 5.0, 7.0], dtype=torch.float64)
    assert running.mean == pytest.approx(4.0)
    assert running.std == pytest.approx(float(all_vals.std()), rel=1e-6)
    restored = RunningMoments()
    restored.load_state_dict(running.state_dict())
    assert restored.state_dict() == running.state_dict()
    with pytest.raises(ValueError, match="RunningMoments"):
        normalize_rewards(torch.ones(2), "running", None)


def test_whiten_masks_padding_and_skips_tiny_batches():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    m = torch.tensor([[1.0, 1.0, 0.0]])
    out = whiten(x, m)
    torch.testing.assert_close(out, torch.tensor([[-1 / math.sqrt(2 + 1e-8), 1 / math.sqrt(2 + 1e-8), 0.0]]))
    one = whiten(torch.tensor([[5.0, 9.0]]), torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(one, torch.tensor([[5.0, 0.0]]))  # fewer than 2 valid tokens: unchanged
    torch.testing.assert_close(whiten(x, torch.zeros(1, 3)), torch.zeros(1, 3))


def test_sample_loss_weights_length_and_difficulty():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    w = sample_loss_weights(mask, length_weighting=True)
    # raw: long 1.5 - 1 = 0.5, short 1.5 -> normalised to mean 1: 0.5, 1.5
    torch.testing.assert_close(w, torch.tensor([0.5, 1.5]), atol=1e-6, rtol=0)
    w = sample_loss_weights(mask, difficulty=torch.tensor([0.0, 2.0]))
    # 0.5 and 2.0 (clamped difficulty 1) -> x 2/2.5
    torch.testing.assert_close(w, torch.tensor([0.4, 1.6]), atol=1e-6, rtol=0)
    torch.testing.assert_close(sample_loss_weights(mask), torch.ones(2))


def test_pf_ppo_weights_and_resampling():
    s = torch.tensor([2.0, -1.0, 0.0, 1.0])
    torch.testing.assert_close(pf_ppo_weights(s, "pow", 2.0), torch.tensor([4.0, 1.0, 0.0, 1.0]) + 1e-8)
    torch.testing.assert_close(pf_ppo_weights(s, "max_min"), torch.tensor([1.0, 1.0, 0.0, 0.0]) + 1e-8)
    torch.testing.assert_close(pf_ppo_weights(s, "max_random"), torch.tensor([0.4, 0.1, 0.1, 0.1]) + 1e-8)
    idx = pf_ppo_resample(s, "max_min", generator=torch.Generator().manual_seed(0))
    assert idx.shape == (4,) and set(idx.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match="reweight method"):
        pf_ppo_weights(s, "top")


def test_apply_kl_penalty_subtracts_beta_kl_on_valid_tokens():
    scores = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    ref = torch.tensor([[-1.5, -0.5], [-2.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = apply_kl_penalty(scores, old, ref, mask, kl_coef=0.1, kind="kl")
    torch.testing.assert_close(out.token_level_rewards, torch.tensor([[-0.05, 1.05], [0.0, 0.0]]))
    assert out.mean_kl == pytest.approx((0.0 + 0.0) / 2)  # row 0: (0.5 - 0.5) / 2, row 1: 0
    out = apply_kl_penalty(scores, old, ref, mask, kl_coef=1.0, kind="abs")
    assert out.mean_kl == pytest.approx((0.5 + 0.0) / 2)


def test_scores_to_token_rewards_places_score_on_last_valid_token():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    out = scores_to_token_rewards(torch.tensor([2.0, -1.0, 5.0]), mask)
    torch.testing.assert_close(out, torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, -1.0], [0.0, 0.0, 0.0]]))
