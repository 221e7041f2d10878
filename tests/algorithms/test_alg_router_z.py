"""The router z-loss on hand-computed numbers: 2 layers, 3 experts, a pad token (ST-MoE eq. 5)."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algorithms import router_z_loss

# Logits of three token slots per layer; the third slot is padding.
LAYER1 = [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [9.0, 9.0, 9.0]]
LAYER2 = [[2.0, -1.0, 0.5], [0.0, 0.0, math.log(2.0)], [5.0, 0.0, 0.0]]
MASK = torch.tensor([1.0, 1.0, 0.0])


def _lse(row):
    return math.log(sum(math.exp(v) for v in row))


def test_mean_squared_logsumexp_of_real_tokens_summed_over_layers():
    # layer 1: lse(0,0,0) = log 3, lse(1,2,3) = 3 + log(1 + e^-1 + e^-2); the pad's lse (9 + log 3) never counts
    layer1 = (math.log(3) ** 2 + _lse(LAYER1[1]) ** 2) / 2
    layer2 = (_lse(LAYER2[0]) ** 2 + math.log(4.0) ** 2) / 2  # lse(0, 0, log 2) = log 4
    a, b = torch.tensor(LAYER1), torch.tensor(LAYER2)
    assert float(router_z_loss([a], MASK)) == pytest.approx(layer1, rel=1e-6)
    assert float(router_z_loss([a, b], MASK)) == pytest.approx(layer1 + layer2, rel=1e-6)
    # every slot counted (Megatron-core on an unpadded input): the pad's term joins the mean
    everything = (math.log(3) ** 2 + _lse(LAYER1[1]) ** 2 + (9 + math.log(3)) ** 2) / 3
    assert float(router_z_loss([a], torch.ones(3))) == pytest.approx(everything, rel=1e-6)


def test_gradient_pulls_the_logits_of_real_tokens_towards_zero():
    a = torch.tensor(LAYER1, requires_grad=True)
    router_z_loss([a], MASK).backward()
    assert torch.count_nonzero(a.grad[2]) == 0  # the pad
    # d/dz (1/T) lse(z)^2 = (2/T) lse(z) softmax(z)
    z = torch.tensor(LAYER1[1])
    torch.testing.assert_close(a.grad[1], 2 / 2 * torch.logsumexp(z, 0) * torch.softmax(z, 0))


def test_no_real_token_or_no_layer_gives_zero_and_bad_shapes_are_refused():
    a = torch.tensor(LAYER1)
    assert float(router_z_loss([a], torch.zeros(3))) == 0.0
    assert float(router_z_loss([], MASK)) == 0.0
    with pytest.raises(ValueError, match="token slots"):
        router_z_loss([a], torch.ones(4))


def test_shares_of_split_tokens_add_up_to_the_loss():
    # two processes hold tokens {x1} and {x2, pad} of the same rows (Ulysses): with T summed over both,
    # each returns its tokens' share, and the shares add up to the whole loss
    whole = float(router_z_loss([torch.tensor(LAYER1), torch.tensor(LAYER2)], MASK))
    tokens = MASK.sum()
    parts = [(slice(0, 1)), (slice(1, 3))]
    shares = [float(router_z_loss([torch.tensor(LAYER1)[p], torch.tensor(LAYER2)[p]], MASK[p], reduce=lambda t: tokens)) for p in parts]
    assert sum(shares) == pytest.approx(whole, rel=1e-6)
    assert shares[0] != pytest.approx(shares[1])
