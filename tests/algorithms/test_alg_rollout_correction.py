"""Rollout importance sampling (`posttrain.algorithms.rollout_importance_weights`): weights, bounds,
rejection and veto against hand-computed numbers, and the per-token loss weights it feeds."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from posttrain.algorithms import POLICY_LOSSES, aggregate_loss, ppo_clip_loss, rollout_importance_weights
from posttrain.algorithms.rollout_correction import is_threshold_spec

# Two sequences: row 0 has 3 real tokens, row 1 has 2 (its last column is padding with junk values).
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
DIFF = torch.tensor([[0.5, -0.1, 1.5], [-2.0, 0.2, 9.0]])  # log pi_old - log pi_rollout
ROLLOUT = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -4.0]])
OLD = ROLLOUT + DIFF


def correct(**kw):
    return rollout_importance_weights(OLD, ROLLOUT, MASK, **kw)


def test_token_truncate_caps_weights_and_rejects_nothing():
    out = correct(threshold=2.0)
    ratio = DIFF.exp()
    expected = torch.minimum(ratio, torch.tensor(2.0)) * MASK
    torch.testing.assert_close(out.weights, expected)
    assert torch.equal(out.keep, MASK)
    real = expected[MASK > 0]
    m = out.metrics
    assert m["rollout_is/mean"] == pytest.approx(float(real.mean()))
    assert m["rollout_is/std"] == pytest.approx(float(real.std(unbiased=False)))
    assert m["rollout_is/max"] == pytest.approx(2.0) and m["rollout_is/min"] == pytest.approx(math.exp(-2.0))
    # ratios exp(0.5)=1.65, exp(-0.1), exp(1.5)=4.48 | exp(-2)=0.135, exp(0.2): one above 2, one below 1/2.
    assert m["rollout_is/fraction_high"] == pytest.approx(1 / 5) and m["rollout_is/fraction_low"] == pytest.approx(1 / 5)
    v = real / real.mean()
    assert m["rollout_is/eff_sample_size"] == pytest.approx(float(1.0 / (v**2).mean()))
    assert m["rollout_is/mismatch_kl"] == pytest.approx(float(-DIFF[MASK > 0].mean()), abs=1e-6)
    assert m["rollout_is/masked_fraction"] == 0.0 and m["rollout_is/veto_fraction"] == 0.0


def test_token_mask_mode_rejects_tokens_outside_the_bounds_and_keeps_their_weights():
    out = correct(threshold=2.0, mode="mask")  # lower bound 1/2 by default
    torch.testing.assert_close(out.weights, DIFF.exp() * MASK)  # not truncated
    expected_keep = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    assert torch.equal(out.keep, expected_keep)
    assert out.metrics["rollout_is/masked_fraction"] == pytest.approx(2 / 5)
    narrow = correct(threshold=2.0, threshold_lower=0.95, mode="mask")  # exp(-0.1) = 0.905 < 0.95
    assert narrow.keep[0].tolist() == [1.0, 0.0, 0.0]


def test_zero_mode_sets_weights_outside_the_bounds_to_zero_and_rejects_nothing():
    # IcePop's M(k): k inside [L, U], else 0. Ratios exp(0.5)=1.65, exp(-0.1)=0.905, exp(1.5)=4.48 | exp(-2)=0.135, exp(0.2)=1.22.
    out = correct(threshold=4.0, threshold_lower=0.5, mode="zero")
    r = DIFF.exp()
    expected = torch.tensor([[r[0, 0], r[0, 1], 0.0], [0.0, r[1, 1], 0.0]])
    torch.testing.assert_close(out.weights, expected)
    assert torch.equal(out.keep, MASK)  # the zeroed tokens stay in the normalisers
    assert out.metrics["rollout_is/masked_fraction"] == 0.0
    assert out.metrics["rollout_is/fraction_high"] == pytest.approx(1 / 5) and out.metrics["rollout_is/fraction_low"] == pytest.approx(1 / 5)
    assert out.metrics["rollout_is/mean"] == pytest.approx(float(expected.sum() / 5))
    # the token-mean loss divides by all 5 real tokens: a zeroed token lowers the loss, unlike mask mode's 3
    loss_mat = torch.ones(2, 3)
    assert float(aggregate_loss(loss_mat, out.keep, "token-mean", weights=out.weights)) == pytest.approx(float(expected.sum() / 5))
    masked = correct(threshold=4.0, threshold_lower=0.5, mode="mask")
    assert float(aggregate_loss(loss_mat, masked.keep, "token-mean", weights=masked.weights)) == pytest.approx(float(expected.sum() / 3))


def test_threshold_specs_read_a_bound_or_icepops_pair():
    assert is_threshold_spec(2.0) == (2.0, None) and is_threshold_spec("3") == (3.0, None)
    assert is_threshold_spec("0.5_4.0") == (4.0, 0.5)
    for bad, why in (("4_0.5", "0 < L <= U"), ("a_b", "two numbers"), (True, "a number"), (-1, "0 < L <= U")):
        with pytest.raises(ValueError, match=why):
            is_threshold_spec(bad)


@pytest.mark.parametrize("level", ["sequence", "geometric"])
def test_sequence_levels_share_one_weight_per_sequence_and_ignore_padding(level):
    sums = torch.tensor([0.5 - 0.1 + 1.5, -2.0 + 0.2])  # the padded 9.0 is not counted
    seq = sums if level == "sequence" else sums / torch.tensor([3.0, 2.0])
    out = correct(threshold=10.0, level=level, mode="mask", threshold_lower=0.3)
    expected = seq.exp()[:, None] * MASK
    torch.testing.assert_close(out.weights, expected)
    # sequence: exp(1.9)=6.7 kept, exp(-1.8)=0.165 rejected; geometric: exp(0.633), exp(-0.9)=0.41 both kept
    kept = [True, False] if level == "sequence" else [True, True]
    assert out.keep.tolist() == [[float(k) * m for m in row] for k, row in zip(kept, MASK.tolist())]


def test_safety_bound_and_veto_use_the_right_ratio():
    old = ROLLOUT.clone()
    old[0, 1] -= 30.0  # ratio exp(-30) = 9e-14: bounded to exp(-20) = 2e-9 for the weight
    out = rollout_importance_weights(old, ROLLOUT, MASK, threshold=2.0, level="sequence", veto_threshold=1e-12)
    assert out.weights[0, 0] == pytest.approx(math.exp(-20.0), rel=1e-5)
    # The veto reads the unbounded token ratio (9e-14 < 1e-12, though exp(-20) is not): row 0 goes.
    assert out.keep.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    assert out.metrics["rollout_is/veto_fraction"] == pytest.approx(0.5)
    lenient = rollout_importance_weights(old, ROLLOUT, MASK, threshold=2.0, veto_threshold=1e-20)
    assert torch.equal(lenient.keep, MASK)


def test_equal_log_probs_give_unit_weights():
    out = rollout_importance_weights(ROLLOUT, ROLLOUT, MASK, threshold=2.0, level="geometric", veto_threshold=1e-4)
    assert torch.equal(out.weights, MASK) and torch.equal(out.keep, MASK)
    assert out.metrics["rollout_is/mismatch_kl"] == 0.0 and out.metrics["rollout_is/eff_sample_size"] == pytest.approx(1.0)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="lower <= upper"):
        correct(threshold=2.0, threshold_lower=3.0)
    with pytest.raises(ValueError, match="level"):
        correct(threshold=2.0, level="tokens")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_per_token_weights_multiply_each_token_loss(mode):
    g = torch.Generator().manual_seed(0)
    loss_mat = torch.randn(2, 3, generator=g)
    w = torch.rand(2, 3, generator=g) * MASK
    got = aggregate_loss(loss_mat, MASK, mode, weights=w)
    assert float(got) == pytest.approx(float(aggregate_loss(loss_mat * w, MASK, mode)))
    with pytest.raises(ValueError, match="per-token weights"):
        aggregate_loss(loss_mat, MASK, mode, weights=torch.ones(2, 4))


def test_every_policy_loss_takes_per_token_weights():
    g = torch.Generator().manual_seed(1)
    kw = dict(
        old_logprob=OLD, logprob=(OLD + 0.1 * torch.randn(2, 3, generator=g)).requires_grad_(),
        advantages=torch.randn(2, 3, generator=g), response_mask=MASK,
    )
    ones = torch.ones(2, 3)
    standard = set(kw) | {"loss_agg_mode"}
    for name, fn in POLICY_LOSSES.items():
        required = {n for n, p in inspect.signature(fn).parameters.items() if p.default is inspect.Parameter.empty}
        if not required <= standard:
            continue  # needs inputs an RL batch does not have (DPO's reference log-probs)
        plain = fn(**kw).loss
        assert float(fn(**kw, sample_weights=ones).loss.detach()) == pytest.approx(float(plain.detach()), rel=1e-6), name
        zero_row = ones.clone()
        zero_row[1] = 0.0
        assert float(fn(**kw, sample_weights=zero_row).loss.detach()) != pytest.approx(float(plain.detach())), name
    # For the PPO clip loss the weighted loss is sum_t w_t L_t / N (token-mean).
    w = torch.rand(2, 3, generator=g)
    out = ppo_clip_loss(**kw, sample_weights=w)
    ratio = (kw["logprob"] - OLD).exp()
    adv = kw["advantages"]
    per_token = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    per_token = torch.where(adv < 0, torch.minimum(per_token, -adv * 3.0), per_token)
    expected = (per_token * w * MASK).sum() / MASK.sum()
    assert float(out.loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-6)
