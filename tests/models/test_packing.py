"""Packing sequences into fewer rows: the layout, and that log-probs and gradients are unchanged."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from posttrain.models.logprobs import response_hidden_states, response_logprobs
from posttrain.models.packing import pack_batch, packing_supported


def batch(prompts: list[list[int]], responses: list[list[int]]):
    """Left-padded prompts and right-padded responses (pad 0) with float masks."""
    P, T = max(map(len, prompts)), max(map(len, responses))
    pi, pm = torch.zeros(len(prompts), P, dtype=torch.long), torch.zeros(len(prompts), P)
    ri, rm = torch.zeros(len(prompts), T, dtype=torch.long), torch.zeros(len(prompts), T)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        pi[i, P - len(p) :], pm[i, P - len(p) :] = torch.tensor(p), 1.0
        ri[i, : len(r)], rm[i, : len(r)] = torch.tensor(r), 1.0
    return pi, pm, ri, rm


# Lengths 7, 3, 3, 2, 2: first-fit decreasing into width 7 gives rows [A], [B C], [D E] (3 rows, not 5).
PROMPTS = [[11, 12, 13], [21], [31, 32], [41], [51]]
RESPONSES = [[14, 15, 16, 17], [22, 23], [33], [42], [52]]


def test_layout_of_a_packed_batch():
    packed = pack_batch(*batch(PROMPTS, RESPONSES))
    assert packed is not None
    assert packed.input_ids.tolist() == [
        [11, 12, 13, 14, 15, 16, 17],
        [21, 22, 23, 31, 32, 33, 0],
        [41, 42, 51, 52, 0, 0, 0],
    ]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 1, 2, 0], [0, 1, 0, 1, 0, 0, 0]]
    # Response token t of row i is predicted by the packed position just before it.
    flat = packed.input_ids.flatten()
    for i, r in enumerate(RESPONSES):
        for t, token in enumerate(r):
            assert int(flat[packed.gather[i, t] + 1]) == token
    assert packed.valid.sum(1).tolist() == [4, 2, 1, 1, 1]


def test_no_packing_when_it_saves_little_or_masks_are_not_the_record_layout():
    assert pack_batch(*batch([[1, 2], [3, 4]], [[5, 6], [7, 8]])) is None  # nothing to save
    pi, pm, ri, rm = batch(PROMPTS, RESPONSES)
    rm[0, 1] = 0.0  # a hole inside a response
    assert pack_batch(pi, pm, ri, rm) is None


def test_packed_logprobs_and_gradients_equal_the_padded_ones(tiny_lm):
    inputs = batch(PROMPTS, RESPONSES)
    assert packing_supported(tiny_lm)
    results = {}
    for pack in (True, False):
        tiny_lm.zero_grad()
        hidden = response_hidden_states(tiny_lm, *inputs, pack=pack)
        out = response_logprobs(tiny_lm, *inputs, with_entropy=True) if pack else None
        mask = inputs[3]
        real = hidden[mask > 0]
        (real.square().sum()).backward()
        grads = [p.grad.clone() for p in tiny_lm.get_decoder().parameters() if p.grad is not None]
        results[pack] = (real.detach(), grads, out)
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-5, rtol=1e-5)
    for a, b in zip(results[True][1], results[False][1]):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert len(results[True][1]) == len(list(tiny_lm.get_decoder().parameters()))
    # Per-row forwards are the reference for the log-probs of the packed path.
    packed_lp = results[True][2].logprobs
    for i in range(len(PROMPTS)):
        one = [x[i : i + 1] for x in inputs]
        single = response_logprobs(tiny_lm, *one).logprobs[0]
        n = len(RESPONSES[i])
        torch.testing.assert_close(packed_lp[i, :n], single[:n], atol=1e-5, rtol=0)
        assert packed_lp[i, n:].eq(0).all()


class CrossTalk(nn.Module):
    """A fake decoder whose token i sees every earlier token of its row, whatever the positions."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=64, _attn_implementation="fake")
        self.emb = nn.Embedding(64, 4)

    def get_decoder(self):
        return lambda input_ids, **_: SimpleNamespace(last_hidden_state=self.emb(input_ids).cumsum(1))


def test_a_model_that_ignores_packed_positions_is_detected():
    assert not packing_supported(CrossTalk())
