"""A teacher's top-k tokens and log-probs (posttrain.models.topk_logprobs) and the student's
log-probs of given tokens (response_logprobs(gather_ids=...)), against the model's own forward."""

from __future__ import annotations

import pytest
import torch

from posttrain.models.logprobs import response_logprobs
from posttrain.models.topk_logprobs import response_topk
from test_logprobs import PROMPTS, RESPONSES, padded


def _full(model, temperature):
    """Per row, log softmax(logits / temperature) (t, V) at the positions that predict its response tokens."""
    out = []
    for p, r in zip(PROMPTS, RESPONSES):
        logits = model(torch.tensor([p + r])).logits[0].float() / temperature
        out.append(torch.log_softmax(logits, -1)[len(p) - 1 : len(p) - 1 + len(r)])
    return out


@pytest.mark.parametrize("chunk_tokens", [2, None])
def test_topk_is_the_full_softmax_s_top_k(tiny_lm, chunk_tokens):
    with torch.inference_mode():
        tokens, logprobs, ids = response_topk(tiny_lm, *padded(), k=5, temperature=0.7, token_temperature=1.3, chunk_tokens=chunk_tokens)
        # the sampled tokens' log-probs of the same forward are response_logprobs', to the bit
        assert torch.equal(tokens, response_logprobs(tiny_lm, *padded(), temperature=1.3, chunk_tokens=chunk_tokens).logprobs)
    assert logprobs.shape == ids.shape == (3, 4, 5)
    for i, full in enumerate(_full(tiny_lm, 0.7)):
        n = len(RESPONSES[i])
        top = full.topk(5, -1)
        torch.testing.assert_close(logprobs[i, :n], top.values, atol=1e-5, rtol=0)
        assert ids[i, :n].tolist() == top.indices.tolist()
        assert logprobs[i, n:].abs().sum() == 0 and ids[i, n:].abs().sum() == 0  # padding


def test_gathered_log_probs_and_their_gradient(tiny_lm):
    pid, pm, rid, rm = padded()
    gather = torch.randint(0, 64, (3, 4, 3), generator=torch.Generator().manual_seed(1))
    tiny_lm.train()
    out = response_logprobs(tiny_lm, pid, pm, rid, rm, temperature=0.7, with_entropy=True, gather_ids=gather, chunk_tokens=2)
    for i, full in enumerate(_full(tiny_lm, 0.7)):
        n = len(RESPONSES[i])
        torch.testing.assert_close(out.gathered[i, :n], full.gather(-1, gather[i, :n]), atol=1e-5, rtol=0)
        assert out.gathered[i, n:].abs().sum() == 0
    # the gradient through the recomputed chunks is the plain forward's
    out.gathered.sum().backward()
    chunked = [p.grad.clone() for p in tiny_lm.parameters()]
    tiny_lm.zero_grad()
    sum(full.gather(-1, gather[i, : len(RESPONSES[i])]).sum() for i, full in enumerate(_full(tiny_lm, 0.7))).backward()
    for a, b in zip(chunked, (p.grad for p in tiny_lm.parameters())):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_k_beyond_the_vocabulary_names_the_key(tiny_lm):
    from posttrain.errors import ConfigError

    with pytest.raises(ConfigError, match=r"actor.topk_kl.k=65: the teacher's vocabulary has 64 tokens"), torch.inference_mode():
        response_topk(tiny_lm, *padded(), k=65)
