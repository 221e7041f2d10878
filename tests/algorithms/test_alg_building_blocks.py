import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posttrain.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    aggregate_loss,
    entropy_from_logits,
    entropy_from_logits_chunked,
    kl_penalty,
    value_loss,
)

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


def test_aggregation_modes_hand_computed():
    assert aggregate_loss(LOSS, MASK, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm").item() == pytest.approx((6 + 4) / 2 / 3)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=10).item() == pytest.approx(0.5)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", num_seqs=1).item() == pytest.approx(10 / 3)  # ROLL
    w = torch.tensor([2.0, 0.5, 1.0])
    assert aggregate_loss(LOSS, MASK, "token-mean", weights=w).item() == pytest.approx((12 + 2) / 4)
    assert aggregate_loss(LOSS, MASK, "token-mean", num_tokens=8).item() == pytest.approx(10 / 8)


def test_token_sum_adds_every_valid_token_and_divides_by_nothing():
    assert aggregate_loss(LOSS, MASK, "token-sum").item() == pytest.approx(1 + 2 + 3 + 4)
    w = torch.tensor([2.0, 0.5, 1.0])  # per sequence
    assert aggregate_loss(LOSS, MASK, "token-sum", weights=w).item() == pytest.approx(2 * 6 + 0.5 * 4)
    per_token = torch.tensor([[1.0, 0.0, 2.0], [3.0, 9.0, 9.0], [9.0, 9.0, 9.0]])
    assert aggregate_loss(LOSS, MASK, "token-sum", weights=per_token).item() == pytest.approx(1 + 6 + 12)
    # normalisers are not read: the sum is already the whole (mini-)batch's when its parts add up
    assert aggregate_loss(LOSS, MASK, "token-sum", num_tokens=8, num_seqs=5, loss_scale_factor=3).item() == 10.0
    loss = LOSS.clone().requires_grad_()
    aggregate_loss(loss, MASK, "token-sum").backward()
    assert torch.equal(loss.grad, MASK)  # d sum / d l_it = m_it: every valid token weighs 1


def test_aggregation_edge_cases():
    assert aggregate_loss(LOSS, torch.zeros(3, 3), "token-mean").item() == 0.0
    assert aggregate_loss(LOSS, torch.zeros(3, 3), "seq-mean-token-mean").item() == 0.0
    nan_pad = torch.tensor([[1.0, float("nan")]])
    assert aggregate_loss(nan_pad, torch.tensor([[1.0, 0.0]]), "token-mean").item() == 1.0
    single = aggregate_loss(torch.tensor([[5.0]]), torch.ones(1, 1), "seq-mean-token-mean")
    assert single.item() == 5.0
    with pytest.raises(ValueError, match="valid modes"):
        aggregate_loss(LOSS, MASK, "token-avg")
    assert aggregate_loss(LOSS, torch.zeros(3, 3), "token-sum").item() == 0.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-10, 10, width=32), min_size=1, max_size=5), min_size=1, max_size=4),
       st.integers(0, 6))
def test_seq_mean_token_mean_is_invariant_to_padding(rows, extra_pad):
    T = max(len(r) for r in rows) + extra_pad
    loss = torch.tensor([r + [123.0] * (T - len(r)) for r in rows])
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (T - len(r)) for r in rows])
    expected = sum(sum(r) / len(r) for r in rows) / len(rows)
    for mode in ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum"):
        longer = torch.cat([loss, torch.full((len(rows), 3), 7.0)], dim=1)
        longer_mask = torch.cat([mask, torch.zeros(len(rows), 3)], dim=1)
        assert aggregate_loss(loss, mask, mode).item() == pytest.approx(aggregate_loss(longer, longer_mask, mode).item(), rel=1e-5, abs=1e-5)
    assert aggregate_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_kl_kinds_hand_computed():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    d = torch.tensor([[0.5, -1.0]])
    torch.testing.assert_close(kl_penalty(logp, ref, "kl"), d)
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), d)
    torch.testing.assert_close(kl_penalty(logp, ref, "abs"), d.abs())
    torch.testing.assert_close(kl_penalty(logp, ref, "mse"), 0.5 * d**2)
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), 0.5 * d**2)
    k3 = torch.exp(-d) + d - 1
    torch.testing.assert_close(kl_penalty(logp, ref, "low_var_kl"), k3)
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), k3)
    # clamps: exp(30) would be huge; clamp log ratio to 20 then value to 10
    big = kl_penalty(torch.tensor([[-31.0]]), torch.tensor([[-1.0]]), "k3")
    assert big.item() == 10.0


def test_kl_straight_through_takes_k2_gradient():
    logp = torch.tensor([[-1.0]], requires_grad=True)
    val = kl_penalty(logp, torch.tensor([[-1.5]]), "k3+")
    assert val.item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    val.sum().backward()
    assert logp.grad.item() == pytest.approx(0.5)  # d/dlogp of 0.5 d^2 = d


def test_kl_full_needs_distributions():
    logits = torch.tensor([[[0.0, 0.0]]])
    ref = torch.tensor([[[math.log(3.0), 0.0]]])  # ref probs 0.75 / 0.25
    expected = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    assert kl_penalty(logits, ref, "full").item() == pytest.approx(expected, rel=1e-6)
    assert kl_penalty(logits, ref, "full").shape == (1, 1)
    with pytest.raises(ValueError, match="full distributions"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), "full")
    with pytest.raises(ValueError, match="valid kinds"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), "k4")


def test_value_loss_clipped_hand_computed():
    values = torch.tensor([[1.0, 0.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0]])
    loss, clipfrac = value_loss(values, old, returns, torch.ones(1, 2), cliprange_value=0.5)
    # token 0: unclipped (1-2)^2 = 1, clipped (0.5-2)^2 = 2.25 -> 2.25; token 1: 1 and 1 -> 1
    assert loss.item() == pytest.approx(0.5 * (2.25 + 1) / 2)
    assert clipfrac.item() == pytest.approx(0.5)
    loss.backward()
    assert values.grad[0, 0].item() == 0.0  # clipped branch has no gradient into values
    loss2, cf2 = value_loss(values, old, returns, torch.ones(1, 2), cliprange_value=None)
    assert loss2.item() == pytest.approx(0.5 * (1 + 1) / 2) and cf2.item() == 0.0


def test_entropy_hand_computed_and_chunked_matches():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    ent = entropy_from_logits(logits)
    torch.testing.assert_close(ent, torch.tensor([[math.log(4.0), 0.0]]), atol=1e-5, rtol=0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 11, generator=g, requires_grad=True)
    torch.testing.assert_close(entropy_from_logits_chunked(x, chunk_size=4), entropy_from_logits(x))
    entropy_from_logits_chunked(x, chunk_size=4).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert entropy_from_logits(logits.bfloat16()).dtype == torch.float32


def test_kl_controllers():
    fixed = FixedKLController(0.1)
    fixed.update(5.0, 100)
    assert fixed.value == 0.1
    ctl = AdaptiveKLController(init_kl_coef=0.2, target_kl=1.0, horizon=100)
    ctl.update(current_kl=10.0, n_steps=50)  # error clipped to +0.2 -> x1.1
    assert ctl.value == pytest.approx(0.22)
    ctl.update(current_kl=0.9, n_steps=100)  # error -0.1 -> x0.9
    assert ctl.value == pytest.approx(0.198)
    other = AdaptiveKLController(1.0, 1.0, 10)
    other.load_state_dict(ctl.state_dict())
    assert other.value == pytest.approx(0.198)
    with pytest.raises(ValueError, match="horizon"):
        AdaptiveKLController(0.1, 1.0, 0)
