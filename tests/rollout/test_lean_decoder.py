"""The lean decoder computes the HF model's logits (fp32, 1e-5) at prefill and every decode step,
and HFEngine uses it exactly when the architecture is supported."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from posttrain.models.logprobs import batch_logprobs, lm_head_logits
from posttrain.models.positions import position_ids_from_mask
from posttrain.rollout import HFEngine, SamplingParams
from posttrain.models.lean_decoder import LeanDecoder, lean_unsupported_reason
from test_hf_engine import PAD, prompt_batch


def qwen2(tied: bool) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, tie_word_embeddings=tied, rope_theta=500.0,
    )
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # HF initialises biases to 0; make the q/k/v biases matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


def llama() -> LlamaForCausalLM:
    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=64, hidden_size=48, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
        intermediate_size=96, tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).eval()


def hf_logits(model, ids, mask) -> torch.Tensor:
    """The HF model's own logits (B, S, V) for left-padded sequences."""
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask.long(), position_ids=position_ids_from_mask(mask)).logits


@pytest.mark.parametrize("make", [lambda: qwen2(tied=True), lambda: qwen2(tied=False), llama], ids=["qwen2-tied", "qwen2", "llama-gqa3"])
def test_prefill_and_every_decode_step_equal_hf_logits(make):
    model = make()
    assert lean_unsupported_reason(model) is None
    prompts = prompt_batch()  # left padded: lengths 3, 5, 1
    P, T = prompts.input_ids.shape[1], 6
    torch.manual_seed(3)
    new = torch.randint(1, 64, (3, T))  # (B, T) tokens fed one at a time
    ids = torch.cat([prompts.input_ids, new], dim=1)  # (B, P + T)
    mask = torch.cat([prompts.attention_mask, torch.ones(3, T)], dim=1)
    expected = hf_logits(model, ids, mask)  # (B, P + T, V)
    positions = position_ids_from_mask(mask)
    with torch.inference_mode():
        lean = LeanDecoder(model, P + T)
        hidden = lean.prefill(prompts.input_ids, prompts.attention_mask, positions[:, :P])
        torch.testing.assert_close(lm_head_logits(model, hidden), expected[:, P - 1], atol=1e-5, rtol=0)
        for t in range(T):
            hidden = lean.step(new[:, t], positions[:, P + t])
            torch.testing.assert_close(lm_head_logits(model, hidden), expected[:, P + t], atol=1e-5, rtol=0)


def test_a_bf16_model_stays_close_to_hf_bf16_at_prefill_and_every_decode_step():
    """rollout.dtype bf16: the same ops in bf16 (rounded at other points than HF's, hence the tolerance)."""
    model = qwen2(tied=False).to(torch.bfloat16)
    prompts = prompt_batch()
    P, T = prompts.input_ids.shape[1], 6
    torch.manual_seed(3)
    new = torch.randint(1, 64, (3, T))
    ids = torch.cat([prompts.input_ids, new], dim=1)
    mask = torch.cat([prompts.attention_mask, torch.ones(3, T)], dim=1)
    expected = hf_logits(model, ids, mask).float()  # (B, P + T, V), HF's own bf16 arithmetic
    positions = position_ids_from_mask(mask)
    with torch.inference_mode():
        lean = LeanDecoder(model, P + T)
        got = [lm_head_logits(model, lean.prefill(prompts.input_ids, prompts.attention_mask, positions[:, :P]))]
        got += [lm_head_logits(model, lean.step(new[:, t], positions[:, P + t])) for t in range(T)]
    for t, logits in enumerate(got):
        torch.testing.assert_close(logits, expected[:, P - 1 + t], atol=0.01, rtol=0)  # measured: 0.002


def test_one_token_prompts():
    model = llama()
    ids = torch.tensor([[5], [9]])
    expected = hf_logits(model, torch.tensor([[5, 7], [9, 2]]), torch.ones(2, 2))  # (2, 2, V)
    with torch.inference_mode():
        lean = LeanDecoder(model, 3)
        first = lm_head_logits(model, lean.prefill(ids, torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.long)))
        second = lm_head_logits(model, lean.step(torch.tensor([7, 2]), torch.ones(2, dtype=torch.long)))
    torch.testing.assert_close(first, expected[:, 0], atol=1e-5, rtol=0)
    torch.testing.assert_close(second, expected[:, 1], atol=1e-5, rtol=0)


def test_dropped_and_repeated_rows_keep_their_cache():
    model = qwen2(tied=True)
    prompts = prompt_batch()
    P = prompts.input_ids.shape[1]
    new = torch.tensor([[7], [9], [11]])
    mask = torch.cat([prompts.attention_mask, torch.ones(3, 1)], dim=1)
    expected = hf_logits(model, torch.cat([prompts.input_ids, new], 1), mask)[:, -1]  # (B, V)
    positions = position_ids_from_mask(mask)
    with torch.inference_mode():
        lean = LeanDecoder(model, P + 1)
        lean.prefill(prompts.input_ids, prompts.attention_mask, positions[:, :P])
        keep = torch.tensor([2, 0, 2])
        lean.reorder(keep)
        logits = lm_head_logits(model, lean.step(new[keep, 0], positions[keep, P]))
    torch.testing.assert_close(logits, expected[keep], atol=1e-5, rtol=0)


def test_engine_uses_the_lean_path_and_matches_the_hf_path(tiny_lm, monkeypatch):
    sizes: list[int] = []
    step = LeanDecoder.step
    monkeypatch.setattr(LeanDecoder, "step", lambda self, tokens, pos: sizes.append(len(tokens)) or step(self, tokens, pos))
    params = SamplingParams(temperature=0.9, n=4, max_new_tokens=12, stop_token_ids=tuple(range(3, 12)))
    lean = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, seed=2)
    hf = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, seed=2, lean_decode=False)
    assert lean.uses_lean_decoder() and not hf.uses_lean_decoder()
    for share in (False, True):
        lean.share_prompt_prefill = hf.share_prompt_prefill = share
        a = lean.generate(prompt_batch(), params, expected_version=0, seed=4)
        b = hf.generate(prompt_batch(), params, expected_version=0, seed=4)
        assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.response_mask, b.response_mask)
        torch.testing.assert_close(a.rollout_logprobs, b.rollout_logprobs, atol=1e-5, rtol=0)
        torch.testing.assert_close(batch_logprobs(tiny_lm, a, temperature=0.9).logprobs, a.rollout_logprobs, atol=1e-5, rtol=0)
    assert sizes[0] == 12 and min(sizes) < 12  # finished rows left the lean decoder's batch too


def test_unsupported_configurations_fall_back_to_the_hf_path(tiny_lm):
    tiny_lm.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    assert "rope_type 'linear'" in lean_unsupported_reason(tiny_lm)
    assert not HFEngine(tiny_lm, pad_token_id=PAD, copy_weights=False).uses_lean_decoder()
    tiny_lm.config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    assert lean_unsupported_reason(tiny_lm) is None
    handle = tiny_lm.get_decoder().register_forward_hook(lambda *a: None)
    assert "forward hooks" in lean_unsupported_reason(tiny_lm)  # a hook must see every forward
    handle.remove()
    tiny_lm.config.model_type = "gpt2"
    assert "model_type 'gpt2'" in lean_unsupported_reason(tiny_lm)
