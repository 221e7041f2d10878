"""DPPO's two trust regions (verl's dppo_tv, dppo_kl) on hand-computed tokens: which tokens keep their
gradient, the truncated ratio weight, the loss value and its gradient."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algorithms import dppo_kl_loss, dppo_tv_loss, get_policy_loss

# One row of five tokens: (old prob, new prob, advantage); the last token is padding.
TOKENS = [(0.50, 0.80, 1.0), (0.50, 0.60, 1.0), (0.40, 0.10, -1.0), (0.10, 0.90, 2.0), (0.30, 0.30, 1.0)]
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])


def _inputs():
    old = torch.tensor([[math.log(q) for q, _, _ in TOKENS]])
    new = torch.tensor([[math.log(p) for _, p, _ in TOKENS]], requires_grad=True)
    adv = torch.tensor([[a for _, _, a in TOKENS]])
    return old, new, adv


def _expected(valid: list[bool], c: float | None):
    """(loss, d loss / d log pi) of -A sg[min(r, C)] log pi sg[valid], token-mean over the 4 real tokens."""
    loss, grads = 0.0, []
    for (q, p, a), keep in zip(TOKENS[:4], valid):
        w = p / q if c is None else min(p / q, c)
        loss += -a * w * math.log(p) * keep / 4
        grads.append(-a * w * keep / 4)
    return loss, grads + [0.0]


def test_tv_keeps_tokens_whose_probability_moved_less_than_the_bound_towards_the_advantage():
    old, new, adv = _inputs()
    out = dppo_tv_loss(old_logprob=old, logprob=new, advantages=adv, response_mask=MASK, clip_ratio=0.2, clip_ratio_c=3.0)
    # p - q: +0.3 (A > 0: over 0.2, cut), +0.1 (kept), -0.3 (A < 0: under -0.2, cut), +0.8 (cut)
    valid = [False, True, False, False]
    loss, grads = _expected(valid, 3.0)
    assert float(out.loss.detach()) == pytest.approx(loss, rel=1e-5)
    out.loss.backward()
    torch.testing.assert_close(new.grad[0], torch.tensor(grads), rtol=1e-5, atol=1e-7)
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.75)
    # a wider bound keeps them all; the fourth token's ratio 9 is truncated at C = 3
    out = dppo_tv_loss(old_logprob=old, logprob=new.detach(), advantages=adv, response_mask=MASK, clip_ratio=0.9, clip_ratio_c=3.0)
    assert float(out.loss) == pytest.approx(_expected([True] * 4, 3.0)[0], rel=1e-5)
    assert out.metrics["pg_clipfrac"] == 0.0 and out.metrics["pg_clipfrac_lower"] == pytest.approx(0.25)
    # asymmetric bounds: clip_ratio_low bounds the fall of a negative-advantage token
    out = dppo_tv_loss(old_logprob=old, logprob=new.detach(), advantages=adv, response_mask=MASK, clip_ratio=0.2,
                       clip_ratio_low=0.35, clip_ratio_c=None)
    assert float(out.loss) == pytest.approx(_expected([False, True, True, False], None)[0], rel=1e-5)


def test_kl_bounds_the_binary_kl_and_never_cuts_a_move_against_the_advantage():
    old, new, adv = _inputs()

    def binary_kl(q, p):
        return q * math.log(q / p) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
    kls = [binary_kl(q, p) for q, p, _ in TOKENS[:4]]  # 0.193, 0.0204, 0.2218, 1.7578
    out = dppo_kl_loss(old_logprob=old, logprob=new, advantages=adv, response_mask=MASK, clip_ratio=0.1, clip_ratio_c=3.0)
    valid = [kls[0] <= 0.1, kls[1] <= 0.1, kls[2] <= 0.1, kls[3] <= 0.1]
    assert valid == [False, True, False, False]
    loss, grads = _expected(valid, 3.0)
    assert float(out.loss.detach()) == pytest.approx(loss, rel=1e-5)
    out.loss.backward()
    torch.testing.assert_close(new.grad[0], torch.tensor(grads), rtol=1e-5, atol=1e-7)
    # flip the advantages: each move is now against the push, so every token keeps its gradient
    out = dppo_kl_loss(old_logprob=old, logprob=new.detach(), advantages=-adv, response_mask=MASK, clip_ratio=0.1, clip_ratio_c=3.0)
    assert out.metrics["pg_clipfrac"] == 0.0


def test_registered_under_verl_s_names_with_the_ratio_options():
    assert get_policy_loss("dppo_tv") is dppo_tv_loss and get_policy_loss("dppo_kl") is dppo_kl_loss
