"""The LM-head kernel flags: entropy checkpointing and the fused head give the numbers of the plain
autograd path (log-probs, entropy, every parameter's gradient) and really take their own path."""

import pytest
import torch

import posttrain.models.fused_head as fused_head
import posttrain.models.logprobs as logprobs
from posttrain.models.fused_head import fused_head_reason, fused_token_logprobs
from posttrain.models.logprobs import HeadKernel, response_logprobs, token_logprobs_from_hidden

PROMPTS = [[5, 6, 7], [1, 2, 3, 4, 9], [8]]
RESPONSES = [[10, 11, 12, 13], [20, 21], [30, 31, 32]]


def padded(P=5, T=4):
    B = len(PROMPTS)
    pid, pm = torch.zeros(B, P, dtype=torch.long), torch.zeros(B, P)
    rid, rm = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T)
    for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
        pid[i, P - len(p) :], pm[i, P - len(p) :] = torch.tensor(p), 1.0
        rid[i, : len(r)], rm[i, : len(r)] = torch.tensor(r), 1.0
    return pid, pm, rid, rm


def run(model, kernel, temperature=1.0, chunk_tokens=None):
    """Log-probs, entropy and every gradient of loss = sum logprob - 0.3 sum entropy."""
    model.zero_grad()
    out = response_logprobs(model, *padded(), temperature=temperature, with_entropy=True, kernel=kernel,
                            chunk_tokens=chunk_tokens)
    (out.logprobs.sum() - 0.3 * out.entropy.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return out.logprobs.detach(), out.entropy.detach(), grads


def assert_same(a, b, atol=1e-5):
    torch.testing.assert_close(a[0], b[0], atol=atol, rtol=0)
    torch.testing.assert_close(a[1], b[1], atol=atol, rtol=0)
    for name in a[2]:
        torch.testing.assert_close(a[2][name], b[2][name], atol=atol, rtol=1e-4, msg=name)


def test_entropy_checkpointing_gives_the_same_numbers_and_recomputes_the_entropy(tiny_lm, monkeypatch):
    calls = []
    original = logprobs.entropy_from_scaled
    monkeypatch.setattr(logprobs, "entropy_from_scaled", lambda *a: calls.append(1) or original(*a))
    plain = run(tiny_lm, HeadKernel())
    assert len(calls) == 1  # one chunk, forward only
    calls.clear()
    checkpointed = run(tiny_lm, HeadKernel(entropy_checkpointing=True))
    assert len(calls) == 2  # forward, then again in the backward: nothing of it was stored
    assert_same(plain, checkpointed)


def saved_logits(kernel: HeadKernel) -> int:
    """How many (n, V) tensors the head's graph keeps for the backward (a bare head: 6 tokens, V = 50)."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    head = torch.nn.Linear(8, 50, bias=False)
    model.get_output_embeddings = lambda: head
    model.config = type("C", (), {})()
    hidden = torch.randn(6, 8, requires_grad=True)
    targets = torch.randint(0, 50, (6,))
    saved = set()

    def pack(t):
        if t.shape == (6, 50):  # (n, V): not the head weight (V, H) or its transpose
            saved.add(t.data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        token_logprobs_from_hidden(model, hidden, targets, with_entropy=True, kernel=kernel)
    return len(saved)


def test_entropy_checkpointing_stores_fewer_vocabulary_sized_tensors():
    """What the backward keeps: the scaled logits (both) and their softmax (without checkpointing only)."""
    assert saved_logits(HeadKernel()) == 2
    assert saved_logits(HeadKernel(entropy_checkpointing=True)) == 1


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_tokens", [2, None])
def test_the_fused_head_gives_the_plain_numbers_and_gradients(tiny_lm, temperature, chunk_tokens):
    plain = run(tiny_lm, HeadKernel(), temperature)
    fused = run(tiny_lm, HeadKernel(fused="torch"), temperature, chunk_tokens)
    assert_same(plain, fused)


def test_the_fused_head_runs_its_own_backward_and_keeps_no_logits(tiny_lm, monkeypatch):
    calls = []
    original = fused_head._backward_chunk
    monkeypatch.setattr(fused_head, "_backward_chunk", lambda *a: calls.append(a[0].shape[0]) or original(*a))
    run(tiny_lm, HeadKernel(fused="torch"), chunk_tokens=4)
    assert calls == [4, 4, 1]  # 9 response tokens, chunks of 4
    assert saved_logits(HeadKernel(fused="torch")) == 0  # no (n, V) tensor waits for the backward


def test_the_fused_head_folds_a_logit_scale_and_refuses_what_it_cannot_apply(tiny_lm):
    hidden = torch.randn(5, tiny_lm.config.hidden_size)
    targets = torch.tensor([1, 2, 3, 4, 5])
    tiny_lm.config.logit_scale = 0.5  # Cohere's multiplier, applied by lm_head_logits
    try:
        with torch.no_grad():
            want = token_logprobs_from_hidden(tiny_lm, hidden, targets, with_entropy=True)
            got = fused_token_logprobs(tiny_lm, hidden, targets, temperature=1.0, with_entropy=True)
    finally:
        del tiny_lm.config.logit_scale
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=0)
    assert fused_head_reason(tiny_lm) is None
    tiny_lm.config.final_logit_softcapping = 30.0
    try:
        assert "soft-caps" in fused_head_reason(tiny_lm)
    finally:
        del tiny_lm.config.final_logit_softcapping


def test_the_fused_head_under_inference_mode_and_bf16_autocast(tiny_lm):
    with torch.inference_mode():
        want = response_logprobs(tiny_lm, *padded()).logprobs
        got = response_logprobs(tiny_lm, *padded(), kernel=HeadKernel(fused="torch")).logprobs
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want16 = response_logprobs(tiny_lm, *padded()).logprobs
            got16 = response_logprobs(tiny_lm, *padded(), kernel=HeadKernel(fused="torch")).logprobs
    torch.testing.assert_close(got16, want16, atol=2e-2, rtol=0)  # both matmul the head in bf16


def test_a_frozen_head_gets_no_weight_gradient_and_an_adapted_head_is_refused(tiny_lm):
    from posttrain.errors import ConfigError

    tiny_lm.lm_head.requires_grad_(False)  # a LoRA run's base head
    plain = run(tiny_lm, HeadKernel())
    fused = run(tiny_lm, HeadKernel(fused="torch"))
    assert "lm_head.weight" not in plain[2] and tiny_lm.lm_head.weight.grad is None
    assert_same(plain, fused)
    tiny_lm.lm_head = torch.nn.Sequential(tiny_lm.lm_head)  # what a wrapped (adapted) head looks like
    with pytest.raises(ConfigError, match="not a plain linear layer"):
        run(tiny_lm, HeadKernel(fused="torch"))
