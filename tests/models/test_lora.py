"""LoRA adapters (posttrain.models.lora) on the conftest's tiny Qwen2 (hidden 32, 2 layers, 4 heads
of 8, 2 kv heads, MLP 64): trainable parameters are what the rank implies, the adapters-off model is
the base model, the merged weights compute what the adapter computes, the adapter files are peft's,
and the lean forwards leave LoRA layers to the HF path."""

import json
import sys

import pytest
import torch
from peft import PeftModel
from transformers import Qwen2ForCausalLM

from posttrain.cluster.fsdp import check_trained_dtypes
from posttrain.errors import ConfigError, ModelError
from posttrain.models.lean_decoder import lean_unsupported_reason
from posttrain.models.lean_forward import lean_forward_reason, lean_mode
from posttrain.models.logprobs import response_logprobs
from posttrain.models.lora import (
    LoraSettings, adapter_state, add_lora, is_lora, load_adapter_state, merged_tensors, quiet_peft, read_adapter, write_adapter,
)

IDS = torch.tensor([[5, 9, 2, 33, 17, 8, 41], [1, 60, 3, 3, 12, 50, 7]])


def fresh(tiny_lm) -> Qwen2ForCausalLM:
    """A second model with the same base weights."""
    other = Qwen2ForCausalLM(tiny_lm.config).eval()
    other.load_state_dict(tiny_lm.state_dict())
    return other


def with_lora(model, rank=4, alpha=8.0, targets="all-linear", exclude=None, path=None, tmp="."):
    wrapped = add_lora(model, LoraSettings("model", rank, alpha, targets, exclude, path), tmp)
    return wrapped


def move_adapters(model, seed=1):
    """Nonzero B (peft starts it at 0): the adapter now changes the model."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


# Per layer at rank 4: r * (in + out) for q (32->32), k and v (32->16: 2 kv heads of 8), o (32->32),
# gate and up (32->64), down (64->32).
PER_LAYER = {"q_proj": 4 * 64, "k_proj": 4 * 48, "v_proj": 4 * 48, "o_proj": 4 * 64, "gate_proj": 4 * 96, "up_proj": 4 * 96, "down_proj": 4 * 96}


@pytest.mark.parametrize("targets, exclude, expected", [
    ("all-linear", None, 2 * sum(PER_LAYER.values())),  # 2 layers x 2048 = 4096; the output head is not targeted
    (["q_proj", "v_proj"], None, 2 * (256 + 192)),
    ("all-linear", ["down_proj", "gate_proj"], 2 * (2048 - 384 - 384)),
    (r".*layers\.1\.self_attn\.(q|k)_proj", None, 256 + 192),  # a regular expression over full names
    (["lm_head"], None, 4 * (32 + 64)),  # the head (vocabulary 64) when named
])
def test_trainable_parameters_are_what_the_rank_implies(tiny_lm, targets, exclude, expected):
    with_lora(tiny_lm, targets=targets, exclude=exclude)
    trainable = {n: p.numel() for n, p in tiny_lm.named_parameters() if p.requires_grad}
    assert sum(trainable.values()) == expected
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)


def test_a_fresh_adapter_is_the_base_model_and_disabled_adapters_give_it_back(tiny_lm):
    base = fresh(tiny_lm)
    wrapped = with_lora(tiny_lm)
    assert is_lora(tiny_lm) and not is_lora(base)
    assert torch.equal(logits(tiny_lm), logits(base))  # B = 0: exactly the base model
    move_adapters(tiny_lm)
    assert not torch.allclose(logits(tiny_lm), logits(base), atol=1e-3)
    with torch.inference_mode(), wrapped.disable_adapter():  # as the reference policy runs it
        off = tiny_lm(IDS).logits
    assert torch.equal(off, logits(base))
    # the adapters are back on, and still trainable
    assert not torch.allclose(logits(tiny_lm), logits(base), atol=1e-3)
    assert all(p.requires_grad for n, p in tiny_lm.named_parameters() if "lora_" in n)


def test_merged_weights_compute_what_the_adapter_computes(tiny_lm):
    with_lora(tiny_lm, targets=["q_proj", "down_proj", "lm_head"])
    move_adapters(tiny_lm)
    merged = dict(merged_tensors(tiny_lm))
    plain = Qwen2ForCausalLM(tiny_lm.config).eval()
    assert set(merged) == set(plain.state_dict())
    plain.load_state_dict(merged)
    assert torch.allclose(logits(plain), logits(tiny_lm), atol=1e-5)
    # W + (alpha / r) B A for one layer, by hand
    layer = tiny_lm.model.layers[0].self_attn.q_proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    expected = layer.base_layer.weight + (8.0 / 4) * b @ a
    assert torch.allclose(merged["model.layers.0.self_attn.q_proj.weight"], expected, atol=1e-6)
    assert torch.equal(merged["model.layers.0.self_attn.k_proj.weight"], tiny_lm.model.layers[0].self_attn.k_proj.weight)


@pytest.mark.parametrize("fp32_adapters, expected", [(True, torch.float32), (False, torch.bfloat16)])
def test_adapters_over_a_bf16_model_are_fp32_unless_asked_and_keep_small_updates(tiny_lm, fp32_adapters, expected):
    model = tiny_lm.to(torch.bfloat16)
    add_lora(model, LoraSettings("model", 4, 8.0, ["q_proj", "down_proj"], fp32_adapters=fp32_adapters), ".")
    move_adapters(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    assert {p.dtype for p in trained} == {expected}
    assert {p.dtype for p in model.parameters() if not p.requires_grad} == {torch.bfloat16}
    out = model(IDS).logits
    assert out.dtype == torch.bfloat16  # peft casts the sum back to the base layer's dtype
    out.float().logsumexp(-1).sum().backward()
    before = [p.detach().clone() for p in trained]
    torch.optim.AdamW(trained, lr=1e-5, weight_decay=0.0).step()  # a first Adam step moves each entry by ~lr
    moved = sum(int((p.detach() != b).sum()) for p, b in zip(trained, before)) / sum(p.numel() for p in trained)
    # A's entries (about 0.1 in size) have a bf16 spacing near 5e-4: a step of 1e-5 rounds away there
    assert moved == 1.0 if fp32_adapters else moved < 0.1


def test_fsdp_units_must_not_mix_the_fp32_adapters_with_bf16_trained_weights(tiny_lm):
    model = tiny_lm.to(torch.bfloat16)
    add_lora(model, LoraSettings("model", 4, 8.0, ["q_proj"]), ".")
    model.lm_head.weight.requires_grad_(True)  # a bf16 weight trained whole, as a critic's value head
    check_trained_dtypes(model, list(model.model.layers))  # adapters in the layer units, the head in the root: apart
    with pytest.raises(ConfigError, match=r"dtypes bfloat16 and float32 in one root unit .*autocast_adapter_dtype"):
        check_trained_dtypes(model, [])


def test_the_adapter_files_are_peft_format_and_load_back(tiny_lm, tmp_path):
    base = fresh(tiny_lm)
    with_lora(tiny_lm, tmp=str(tmp_path / "base"))
    move_adapters(tiny_lm)
    write_adapter(tiny_lm, tmp_path / "adapter", adapter_state(tiny_lm))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 4, 8.0)
    assert config["base_model_name_or_path"] == str((tmp_path / "base").resolve())
    assert sorted(read_adapter(tmp_path / "adapter"))[0] == "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"
    # peft itself loads it onto the base model
    with quiet_peft():
        loaded = PeftModel.from_pretrained(fresh(base), tmp_path / "adapter")
    assert torch.allclose(logits(loaded), logits(tiny_lm), atol=1e-6)
    # into a fresh adapter of the same shape, and as the adapter a run starts from
    other = fresh(base)
    with_lora(other)
    load_adapter_state(other, read_adapter(tmp_path / "adapter"), "adapter")
    assert torch.equal(logits(other), logits(tiny_lm))
    started = fresh(base)
    with_lora(started, rank=0, alpha=16.0, path=str(tmp_path / "adapter"))
    assert torch.equal(logits(started), logits(tiny_lm))
    assert sum(p.numel() for p in started.parameters() if p.requires_grad) == 4096  # the adapter's rank 4, trainable


def test_a_wrong_adapter_is_refused_with_its_reason(tiny_lm, tmp_path):
    base = fresh(tiny_lm)
    with pytest.raises(ModelError, match="lora_adapter_path .*not a peft adapter directory"):
        with_lora(fresh(base), rank=0, path=str(tmp_path))
    with_lora(tiny_lm)
    write_adapter(tiny_lm, tmp_path / "adapter", adapter_state(tiny_lm))
    with pytest.raises(ConfigError, match=r"model.lora_rank=8 \(the adapter's: 4\)"):
        with_lora(fresh(base), rank=8, path=str(tmp_path / "adapter"))
    narrow = fresh(base)
    with_lora(narrow, targets=["q_proj"])
    with pytest.raises(ModelError, match="does not fit the model's"):
        load_adapter_state(narrow, read_adapter(tmp_path / "adapter"), "adapter")
    with pytest.raises(ConfigError, match=r"model.target_modules=\['qq_proj'\].*named: down_proj, gate_proj, k_proj, lm_head"):
        with_lora(fresh(base), targets=["qq_proj"])
    with pytest.raises(ModelError, match="embed_tokens gets an adapter on its Embedding"):
        with_lora(fresh(base), targets=["embed_tokens"])


def test_missing_peft_is_one_error_with_the_install_command(tiny_lm, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft now raises ImportError
    with pytest.raises(ModelError, match=r"needs the peft package.*pip install 'posttrain\[lora\]'"):
        with_lora(tiny_lm)


def test_the_lean_forwards_leave_lora_layers_to_the_hf_path(tiny_lm):
    """The lean decoder and training forward read plain nn.Linear weights: with LoRA layers they
    decline (the engine samples from a merged plain copy instead), and the log-probs are right."""
    base = fresh(tiny_lm)
    assert lean_unsupported_reason(base) is None
    with_lora(tiny_lm)
    move_adapters(tiny_lm)
    assert "peft.tuners.lora.layer.Linear instead of nn.Linear" in lean_unsupported_reason(tiny_lm)
    pid, pm = IDS[:, :4], torch.ones(2, 4)
    rid, rm = IDS[:, 4:], torch.ones(2, 3)
    with lean_mode("eager"):
        assert "lora" in lean_forward_reason(tiny_lm)
        lean = response_logprobs(tiny_lm, pid, pm, rid, rm).logprobs
    hf = response_logprobs(tiny_lm, pid, pm, rid, rm).logprobs
    assert torch.equal(lean, hf)
    full = torch.log_softmax(logits(tiny_lm)[:, 3:6], -1).gather(-1, rid[..., None])[..., 0]  # (2, 3)
    assert torch.allclose(hf, full, atol=1e-5)
