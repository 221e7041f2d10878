"""GMPO (`loss_mode: geo_mean`): the geometric mean of a sequence's log-space-clipped token ratios,
against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algorithms import get_policy_loss
from posttrain.config import load_config
from posttrain.errors import ConfigError

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
D = torch.tensor([[0.1, 0.6, -0.5], [-0.2, 0.3, 5.0]])  # log pi - log pi_old; [1, 2] is padding
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -4.0]])
ADV = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 0.0]])


def test_each_sequence_takes_the_pessimistic_clipped_log_ratio_and_one_advantage():
    logp = (OLD + D).requires_grad_(True)
    out = get_policy_loss("geo_mean")(old_logprob=OLD, logprob=logp, advantages=ADV, response_mask=MASK, clip_ratio=0.4)
    # row 0, A > 0: min(d, clamp(d, -0.4, 0.4)) = 0.1, 0.4, -0.5 -> mean 0.0 -> ratio 1.0
    # row 1, A < 0: max(d, clamp(d)) = -0.2, 0.3 -> mean 0.05 -> ratio e^0.05
    r0, r1 = math.exp(0.0 / (3 + 1e-8)), math.exp(0.1 / (2 + 1e-8))
    a0, a1 = 3.0 / (3 + 1e-8), -4.0 / (2 + 1e-8)
    assert float(out.loss.detach()) == pytest.approx((-a0 * r0 - a1 * r1) / 2, rel=1e-6)
    out.loss.backward()
    # the clipped token (row 0, 0.6 -> 0.4) has no gradient; the others get -A_i r_i / (2 n_i)
    expected = torch.tensor([[-a0 * r0 / 3, 0.0, -a0 * r0 / 3], [-a1 * r1 / 2, -a1 * r1 / 2, 0.0]]) / 2
    torch.testing.assert_close(logp.grad, expected)
    assert out.metrics["pg_clipfrac"] == pytest.approx(2 / 5)  # row 0's 0.6 and -0.5 were clipped, A > 0
    assert out.metrics["pg_clipfrac_lower"] == pytest.approx(0.0)
    assert out.metrics["ppo_kl"] == pytest.approx(float(-(D * MASK).sum() / 5))


def test_token_weights_enter_as_their_geometric_mean_per_sequence():
    w = torch.tensor([[2.0, 0.5, 1.0], [4.0, 1.0, 7.0]])
    loss_fn = get_policy_loss("gmpo")
    plain = loss_fn(old_logprob=OLD, logprob=OLD, advantages=ADV, response_mask=MASK)  # ratios 1
    weighted = loss_fn(old_logprob=OLD, logprob=OLD, advantages=ADV, response_mask=MASK, sample_weights=w)
    g0, g1 = 1.0, 2.0  # (2 * 0.5 * 1)^(1/3), (4 * 1)^(1/2): the padding's 7 is left out
    a0, a1 = 3.0 / (3 + 1e-8), -4.0 / (2 + 1e-8)
    assert float(plain.loss) == pytest.approx((-a0 - a1) / 2, rel=1e-6)
    assert float(weighted.loss) == pytest.approx((-a0 * g0 - a1 * g1) / 2, rel=1e-5)


def test_aggregation_keys_it_does_not_read_are_refused():
    with pytest.raises(ConfigError, match="actor.loss_agg_mode is not read by policy loss geo_mean"):
        load_config(None, ["actor.policy_loss.loss_mode=geo_mean", "actor.loss_agg_mode=seq-mean-token-sum"])
    assert load_config(None, ["actor.policy_loss.loss_mode=geo_mean"]).actor.policy_loss.loss_mode == "geo_mean"
