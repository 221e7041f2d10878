"""verl's calculate_sum_pi_squared: sum_v pi^2 per token and the variance-proxy metrics, by hand."""

import math

import pytest
import torch

from posttrain.algorithms import sum_pi_squared_from_logits, variance_proxy_metrics


def test_sum_pi_squared_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)], [5.0, 5.0]])  # p = (1/4, 3/4) and (1/2, 1/2)
    assert sum_pi_squared_from_logits(logits).tolist() == pytest.approx([1 / 16 + 9 / 16, 0.5])
    assert float(sum_pi_squared_from_logits(torch.tensor([1e4, 0.0, 0.0]))) == pytest.approx(1.0)  # no overflow
    assert float(sum_pi_squared_from_logits(torch.zeros(8))) == pytest.approx(1 / 8)


def test_variance_proxy_metrics_by_hand():
    old = torch.log(torch.tensor([[0.5, 0.25], [1.0, 1.0]]))
    pi_sq = torch.tensor([[0.5, 0.3], [1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([[2.0, 2.0], [-1.0, 0.0]])
    # w = 1 - 2 pi + sum pi^2: row 0 (0.5, 0.8), W = 1.3; row 1 (0), W = 0; A = (2, -1)
    got = variance_proxy_metrics(old, pi_sq, adv, mask, grad_norm=1.0)
    assert got == pytest.approx({
        "variance_proxy/expected_w": 0.65, "variance_proxy/expected_a_squared": 2.5,
        "variance_proxy/proxy2_total_power": (4 * 1.3 + 0.0) / 2, "variance_proxy/proxy1_signal_strength": 1.0,
        "variance_proxy/proxy3_pure_noise": (2.6 - 1.0) / (2 - 1),
    })
    assert variance_proxy_metrics(old, pi_sq, adv, mask)["variance_proxy/proxy3_pure_noise"] == 0.0  # no grad norm
    # importance weights rho: row means (2, 1); W scaled by rho^2 in expected_w, rhobar^2 in the power
    rho = torch.tensor([[2.0, 2.0], [1.0, 0.0]])
    got = variance_proxy_metrics(old, pi_sq, adv, mask, rollout_is_weights=rho)
    assert got["variance_proxy/expected_w"] == pytest.approx((4 * 0.5 + 4 * 0.8) / 2)
    assert got["variance_proxy/proxy2_total_power"] == pytest.approx(4 * 4 * 1.3 / 2)


def test_verl_s_keys_reach_the_actor():
    from posttrain.config.dialects import translate

    native, report = translate({"actor_rollout_ref": {"actor": {"calculate_sum_pi_squared": True, "sum_pi_squared_checkpointing": True}}}, "verl")
    assert native == {"actor": {"calculate_sum_pi_squared": True}} and not report.refused
    assert "a pass without gradients" in report.entry("actor_rollout_ref.actor.sum_pi_squared_checkpointing").reason
