"""verl's current rollout correction: rejection by divergence bounds (`rollout_rejection`), weights
rescaled to mean 1 (`batch_normalize`) and bypass mode's loss, against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algorithms import bypass_mode_loss, ppo_clip_loss, rollout_importance_weights, rollout_rejection, rs_thresholds

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
DIFF = torch.tensor([[0.5, -0.1, 1.5], [-2.0, 0.2, 9.0]])  # log pi_old - log pi_rollout; [1, 2] is padding
ROLLOUT = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -4.0]])
OLD = ROLLOUT + DIFF


def reject(options, threshold):
    return rollout_rejection(OLD, ROLLOUT, MASK, options=options, threshold=threshold)


def test_thresholds_are_shared_or_given_per_option_and_k1_takes_ratio_bounds():
    assert rs_thresholds("token_k1", 2.0) == {"token_k1": (0.5, 2.0)}  # one number U: L = 1/U
    assert rs_thresholds("token_k1,seq_mean_k3", "0.8_1.25,0.01") == {"token_k1": (0.8, 1.25), "seq_mean_k3": (None, 0.01)}
    assert rs_thresholds("token_k2, seq_max_k2, token_k2", 0.3) == {"token_k2": (None, 0.3), "seq_max_k2": (None, 0.3)}
    for options, threshold, words in [
        ("token_k4", 1.0, "unknown rejection option"),
        ("seq_max_k1", 1.0, "unknown rejection option"),  # verl has no max of k1
        ("token_k2", "0.1_0.5", "one upper bound"),
        ("token_k1,token_k2", "1,2,3", "3 thresholds for 2"),
        ("token_k2", None, "needs a threshold"),
        ("token_k2", -1.0, "positive"),
    ]:
        with pytest.raises(ValueError, match=words):
            rs_thresholds(options, threshold)


def test_token_k1_keeps_tokens_whose_log_ratio_is_inside_the_band():
    keep, m = reject("token_k1", "0.5_2.0")  # |log r| <= log 2 = 0.693: 0.5, -0.1, 0.2 pass; 1.5, -2.0 fail
    assert torch.equal(keep, torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]))
    assert m["rollout_rs/masked_fraction"] == pytest.approx(2 / 5)
    assert m["rollout_rs/token_k1_masked_fraction"] == pytest.approx(2 / 5)
    assert m["rollout_rs/seq_masked_fraction"] == pytest.approx(1.0)


def test_sequence_options_reduce_the_real_tokens_and_reject_whole_sequences():
    k2 = 0.5 * DIFF**2
    k3 = DIFF.exp() - 1 - DIFF
    # seq_sum_k2: row 0 = (0.25 + 0.01 + 2.25) / 2 = 1.255, row 1 = (4 + 0.04) / 2 = 2.02 (padding's 9.0 left out)
    keep, _ = reject("seq_sum_k2", 2.0)
    assert float((k2[0]).sum()) == pytest.approx(1.255) and float(k2[1, :2].sum()) == pytest.approx(2.02)
    assert torch.equal(keep, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    # seq_mean_k3 (k3 = e^r - 1 - r): row 0's mean is the larger; a bound between the two rejects row 0 only
    row0, row1 = float(k3[0].mean()), float(k3[1, :2].mean())
    keep, m = reject("seq_mean_k3", (row0 + row1) / 2)
    assert (row0 > row1) and torch.equal(keep, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    assert m["rollout_rs/seq_masked_fraction"] == pytest.approx(0.5) and m["rollout_rs/masked_fraction"] == pytest.approx(3 / 5)
    # seq_max_k2: row 0 max = 1.125, row 1 max = 2.0 (not the padding's 40.5)
    keep, _ = reject("seq_max_k2", 1.5)
    assert torch.equal(keep, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))


def test_every_option_must_pass():
    keep, m = reject("token_k1,seq_max_k2", "0.5_2.0,2.5")  # seq_max_k2 passes both rows; token_k1 rejects two tokens
    assert torch.equal(keep, torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]))
    keep, m = reject("token_k1,seq_max_k2", "0.5_2.0,1.5")  # now row 1 fails whole
    assert torch.equal(keep, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert m["rollout_rs/seq_max_k2_masked_fraction"] == pytest.approx(2 / 5)
    assert m["rollout_rs/masked_fraction"] == pytest.approx(3 / 5)


def test_batch_normalize_rescales_the_truncated_weights_to_mean_one():
    token = rollout_importance_weights(OLD, ROLLOUT, MASK, threshold=2.0, batch_normalize=True)
    raw = torch.minimum(DIFF.exp(), torch.tensor(2.0)) * MASK
    mean = float(raw[MASK > 0].mean())
    torch.testing.assert_close(token.weights, raw / mean)
    assert token.metrics["rollout_is/batch_norm_factor"] == pytest.approx(mean)
    assert token.metrics["rollout_is/mean"] == pytest.approx(mean)  # the other metrics describe the weights before it
    seq = rollout_importance_weights(OLD, ROLLOUT, MASK, threshold=2.0, level="sequence", batch_normalize=True)
    w0, w1 = min(math.exp(1.9), 2.0), min(math.exp(-1.8), 2.0)  # one weight per sequence
    assert seq.metrics["rollout_is/batch_norm_factor"] == pytest.approx((w0 + w1) / 2)
    torch.testing.assert_close(seq.weights, torch.tensor([[w0] * 3, [w1, w1, 0.0]]) / ((w0 + w1) / 2))


def test_bypass_reinforce_weights_log_pi_by_the_truncated_ratio_and_drops_rejected_tokens():
    adv = torch.tensor([[1.0, -1.0, 2.0], [0.5, 1.0, 3.0]])
    logp = OLD.clone().requires_grad_(True)  # the current policy: pi_old of the table; old_logprob is pi_rollout
    out = bypass_mode_loss(old_logprob=ROLLOUT, logprob=logp, advantages=adv, response_mask=MASK, loss_type="reinforce",
                           rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0")
    w = torch.minimum(DIFF.exp(), torch.tensor(2.0))
    keep = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    expected = (-adv * OLD * w * keep).sum() / keep.sum()
    assert float(out.loss.detach()) == pytest.approx(float(expected), rel=1e-6)
    out.loss.backward()
    torch.testing.assert_close(logp.grad, -adv * w * keep / keep.sum())  # the weights are constants
    assert out.metrics["ppo_kl"] == pytest.approx(float((-DIFF * keep).sum() / keep.sum()))


def test_bypass_reinforce_with_icepop_bounds_zeroes_the_weights_outside_them():
    adv = torch.tensor([[1.0, -1.0, 2.0], [0.5, 1.0, 3.0]])
    logp = OLD.clone().requires_grad_(True)
    out = bypass_mode_loss(old_logprob=ROLLOUT, logprob=logp, advantages=adv, response_mask=MASK, loss_type="reinforce",
                           rollout_is="token", rollout_is_threshold="0.5_2.0")
    r = DIFF.exp()
    w = torch.where((r >= 0.5) & (r <= 2.0), r, torch.zeros(())) * MASK
    assert float(out.loss.detach()) == pytest.approx(float((-adv * OLD * w).sum() / MASK.sum()), rel=1e-6)
    out.loss.backward()
    torch.testing.assert_close(logp.grad, -adv * w / MASK.sum())  # zeroed tokens: no gradient, still in the count


def test_bypass_ppo_clip_is_the_clipped_loss_against_the_rollout_over_the_kept_tokens():
    adv = torch.tensor([[1.0, -1.0, 2.0], [0.5, 1.0, 3.0]])
    out = bypass_mode_loss(old_logprob=ROLLOUT, logprob=OLD, advantages=adv, response_mask=MASK, loss_type="ppo_clip",
                           rollout_is="sequence", rollout_rs="seq_max_k2", rollout_rs_threshold=1.5)
    ref = ppo_clip_loss(old_logprob=ROLLOUT, logprob=OLD, advantages=adv, response_mask=torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert float(out.loss) == pytest.approx(float(ref.loss))  # no weights: the ratio carries the correction
    plain = bypass_mode_loss(old_logprob=ROLLOUT, logprob=OLD, advantages=adv, response_mask=MASK)
    assert float(plain.loss) == pytest.approx(float(ppo_clip_loss(old_logprob=ROLLOUT, logprob=OLD, advantages=adv, response_mask=MASK).loss))
    with pytest.raises(ValueError, match="loss_type"):
        bypass_mode_loss(old_logprob=ROLLOUT, logprob=OLD, advantages=adv, response_mask=MASK, loss_type="grpo")
