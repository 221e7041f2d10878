"""The lean training forward (posttrain.models.lean_forward) against the HF decoder: same response
log-probs to 1e-5 and same parameter gradients to 1e-5 relative, padded and packed, with GQA
(the conftest model: 4 heads, 2 kv heads), biases (Qwen2's q/k/v), tied embeddings and Llama."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import posttrain.models.lean_forward as lean_forward
import posttrain.models.logprobs as logprobs_module
from posttrain.models.logprobs import response_logprobs
from posttrain.models.lean_forward import lean_forward_reason, lean_hidden_states


def batch(B=6, P=7, T=5, seed=1):
    """Left-padded prompts, right-padded responses of varied lengths (packing pays off)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.tensor([7, 2, 5, 1, 3, 6])[:B]
    c = torch.tensor([5, 1, 3, 5, 2, 4])[:B]
    pm = (torch.arange(P)[None] >= P - a[:, None]).float()
    rm = (torch.arange(T)[None] < c[:, None]).float()
    pid = torch.randint(1, 60, (B, P), generator=g) * pm.long()
    rid = torch.randint(1, 60, (B, T), generator=g) * rm.long()
    return pid, pm, rid, rm


def logprobs_and_grads(model, lean, pack, monkeypatch, mode="eager"):
    monkeypatch.setattr("posttrain.models.packing.MIN_SAVING", 0.0 if pack else 2.0)
    calls = []
    original = logprobs_module.lean_hidden_states
    monkeypatch.setattr(logprobs_module, "lean_hidden_states", lambda *a: calls.append(a[2].shape) or original(*a))
    model.zero_grad(set_to_none=True)
    pid, pm, rid, rm = batch()
    with lean_forward.lean_mode(mode if lean else "off"):
        out = response_logprobs(model, pid, pm, rid, rm, with_entropy=True)
    assert len(calls) == int(lean)
    if lean:  # packed rows are fewer than the batch's 6 sequences
        assert (calls[0][0] < 6) == pack
    loss = (out.logprobs * rm).sum() + 0.1 * (out.entropy * rm).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, grads


def assert_same(model, monkeypatch):
    model.train()  # the actor update runs in train mode; these configs have no dropout
    with lean_forward.lean_mode("eager"):
        assert lean_forward_reason(model) is None
    reference, ref_grads = logprobs_and_grads(model, False, False, monkeypatch)
    for pack in (False, True):
        out, grads = logprobs_and_grads(model, True, pack, monkeypatch)
        torch.testing.assert_close(out.logprobs, reference.logprobs, atol=1e-5, rtol=0)
        torch.testing.assert_close(out.entropy, reference.entropy, atol=1e-5, rtol=0)
        assert grads.keys() == ref_grads.keys() and len(grads) == len(list(model.parameters()))
        for name, g in grads.items():
            scale = ref_grads[name].abs().max().clamp(min=1e-12)
            err = float((g - ref_grads[name]).abs().max() / scale)
            assert err < 1e-5, (name, pack, err)


def test_gqa_qwen2_logprobs_and_gradients_equal_hf(tiny_lm, monkeypatch):
    assert_same(tiny_lm, monkeypatch)


def test_tied_embeddings_and_llama_equal_hf(monkeypatch):
    torch.manual_seed(0)
    tied = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
        intermediate_size=48, tie_word_embeddings=True, pad_token_id=0,
    ))
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert_same(tied, monkeypatch)
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, rope_theta=500.0,
    ))
    assert_same(llama, monkeypatch)


def test_unsupported_models_fall_back_to_hf(tiny_lm):
    assert lean_forward_reason(tiny_lm).startswith("off")  # outside any lean_mode block
    with pytest.raises(ValueError, match="compiled"):
        with lean_forward.lean_mode("fast"):
            pass
    with lean_forward.lean_mode("eager"):
        tiny_lm.train()
        tiny_lm.config.attention_dropout = 0.1
        assert lean_forward_reason(tiny_lm) == "attention dropout while training"
        tiny_lm.eval()
        assert lean_forward_reason(tiny_lm) is None
        tiny_lm.config.hidden_act = "gelu"
        assert "hidden_act" in lean_forward_reason(tiny_lm)
    assert lean_forward.current_mode() == "off"  # the block's mode ends with it


def test_the_mode_belongs_to_the_calling_thread(tiny_lm):
    """Two roles in one process (e.g. on decode or worker threads) do not see each other's mode."""
    import threading

    seen = []
    with lean_forward.lean_mode("eager"):
        worker = threading.Thread(target=lambda: seen.append(lean_forward.current_mode()))
        worker.start()
        worker.join()
        assert lean_forward.current_mode() == "eager"
    assert seen == ["off"]


def test_unpadded_rows_use_plain_causal_attention_and_match_hf(tiny_lm):
    ids = torch.randint(1, 60, (3, 9), generator=torch.Generator().manual_seed(2))
    positions = torch.arange(9).expand(3, 9)
    expected = tiny_lm.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
    for mask in (None, torch.ones(3, 9)):
        assert lean_forward.training_attention_mask(positions, mask) is None
        torch.testing.assert_close(lean_hidden_states(tiny_lm, ids, positions, mask), expected, atol=1e-5, rtol=0)


@pytest.mark.slow  # ~35 s on 2 shared cores with a cold inductor cache: compiling forward and backward graphs
def test_compiled_layers_match_eager(tiny_lm, monkeypatch):
    """"compiled" runs the same ops through torch.compile (or falls back to eager with a warning).

    The layer is compiled for this batch's shapes alone: with the dynamic shapes a run asks for
    (every size symbolic, so one graph serves every micro-batch), inductor took twice as long to
    compile the same ops, and the arithmetic checked here is the same."""
    tiny_lm.train()
    eager, eager_grads = logprobs_and_grads(tiny_lm, True, True, monkeypatch)
    monkeypatch.setattr(lean_forward, "_compiled_layer", None)
    asked, compile_ = [], torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **options: asked.append(options) or compile_(fn, **{**options, "dynamic": False}))
    monkeypatch.setattr(logprobs_module, "lean_hidden_states", lean_hidden_states)
    monkeypatch.setattr("posttrain.models.packing.MIN_SAVING", 0.0)
    tiny_lm.zero_grad(set_to_none=True)
    pid, pm, rid, rm = batch()
    with lean_forward.lean_mode("compiled"):
        out = response_logprobs(tiny_lm, pid, pm, rid, rm, with_entropy=True)
        ((out.logprobs * rm).sum() + 0.1 * (out.entropy * rm).sum()).backward()
    assert lean_forward._compiled_layer is not None and not lean_forward._compile_failed  # compiled, not fallen back to eager
    assert asked == [{"dynamic": True}]  # what a run compiles with
    torch.testing.assert_close(out.logprobs, eager.logprobs, atol=1e-5, rtol=0)
    for name, p in tiny_lm.named_parameters():
        scale = eager_grads[name].abs().max().clamp(min=1e-12)
        assert float((p.grad - eager_grads[name]).abs().max() / scale) < 1e-5, name
