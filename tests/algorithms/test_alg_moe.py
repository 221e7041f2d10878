"""The router load-balancing loss on hand-computed numbers: 2 layers, 4 experts, top-2, a pad token."""

from __future__ import annotations

import pytest
import torch

from posttrain.algorithms import load_balancing_loss

# Router probabilities of three token slots; the third is padding. Logits = log(p), so softmax = p.
LAYER1 = [[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.6, 0.25, 0.1, 0.05]]
LAYER2 = [[0.5, 0.25, 0.15, 0.10], [0.25, 0.5, 0.15, 0.10], [0.6, 0.25, 0.1, 0.05]]
MASK = torch.tensor([1.0, 1.0, 0.0])


def _logits(probs, grad=False):
    return torch.tensor(probs).log().requires_grad_(grad)


def test_switch_loss_by_hand_sums_layers_and_skips_padding():
    # layer 1: top-2 of x1 {0,1}, of x2 {2,3}: counts (1,1,1,1), prob sums (.5,.5,.5,.5), T = 2
    #          E / (k T^2) sum_i c_i P_i = 4 / (2 * 4) * 2.0 = 1.0 (perfect balance)
    # layer 2: both tokens pick {0,1}: counts (2,2,0,0), prob sums (.75,.75,.3,.2)
    #          4 / 8 * (1.5 + 1.5) = 1.5
    a, b = _logits(LAYER1), _logits(LAYER2)
    loss = load_balancing_loss([a, b], MASK, top_k=2)
    assert float(loss) == pytest.approx(2.5, abs=1e-6)
    assert float(load_balancing_loss([a], MASK, top_k=2)) == pytest.approx(1.0, abs=1e-6)
    # counting the pad (x3 picks {0,1}): layer 1 counts (2,2,1,1), sums (1.1,.75,.6,.55), T = 3:
    # 4 / (2 * 9) * (2.2 + 1.5 + .6 + .55) = 1.0778
    assert float(load_balancing_loss([a], torch.ones(3), top_k=2)) == pytest.approx(4 / 18 * 4.85, abs=1e-6)


def test_gradient_flows_through_the_probabilities_of_real_tokens_only():
    a, b = _logits(LAYER1, grad=True), _logits(LAYER2, grad=True)
    load_balancing_loss([a, b], MASK, top_k=2).backward()
    assert torch.count_nonzero(a.grad[2]) == 0 and torch.count_nonzero(b.grad[2]) == 0  # the pad
    # layer 2: dL/dp_xi = E c_i / (k T^2) = c_i / 2, so the over-used experts 0 and 1 are pushed down
    p = torch.tensor(LAYER2[0])
    dl_dp = torch.tensor([1.0, 1.0, 0.0, 0.0])
    expected = p * (dl_dp - (p * dl_dp).sum())  # softmax Jacobian
    torch.testing.assert_close(b.grad[0], expected)


def test_no_real_token_or_no_layer_gives_zero_and_bad_shapes_are_refused():
    a = _logits(LAYER1)
    assert float(load_balancing_loss([a], torch.zeros(3), top_k=2)) == 0.0
    assert float(load_balancing_loss([], MASK, top_k=2)) == 0.0
    with pytest.raises(ValueError, match="token slots"):
        load_balancing_loss([a], torch.ones(4), top_k=2)
    with pytest.raises(ValueError, match="top_k"):
        load_balancing_loss([a], MASK, top_k=0)


def test_shares_of_split_tokens_add_up_to_the_loss_with_summed_counts():
    # two processes hold tokens {x1} and {x2, pad} of the same rows (Ulysses): with T and the counts
    # summed over both, each returns its tokens' share; the shares add up to the loss and its gradient
    full = [_logits(LAYER1, grad=True), _logits(LAYER2, grad=True)]
    load_balancing_loss(full, MASK, top_k=2).backward()
    parts = [([_logits(p[:1], grad=True) for p in (LAYER1, LAYER2)], MASK[:1]),
             ([_logits(p[1:], grad=True) for p in (LAYER1, LAYER2)], MASK[1:])]

    def own(logits, mask):  # what this process adds to a sum: its tokens, then its counts per layer
        routed = [torch.zeros_like(z).scatter_(1, torch.topk(z.detach(), 2).indices, 1.0) for z in logits]  # (n, E) top-2
        return [mask.sum(), *[(r * mask[:, None]).sum(0) for r in routed]]

    shares = []
    for i, (logits, mask) in enumerate(parts):
        other = iter(own(*parts[1 - i]))
        shares.append(load_balancing_loss(logits, mask, top_k=2, reduce=lambda t: t + next(other)))
    assert float(sum(shares).detach()) == pytest.approx(2.5, abs=1e-6)
    sum(shares).backward()
    for layer in range(2):
        torch.testing.assert_close(torch.cat([parts[0][0][layer].grad, parts[1][0][layer].grad]), full[layer].grad)
