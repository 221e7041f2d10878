"""What posttrain's two lean Llama/Qwen2 forwards share: which models they support exactly, the
rotary tables, RMSNorm and the half swap of rotary embeddings, each computed as HF's modules do.

The training forward (`posttrain.models.lean_forward`, whole sequences, differentiable) and the
decode forward (`posttrain.models.lean_decoder`, a preallocated KV cache) differ only in how they
run attention; the arithmetic around it lives here once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SUPPORTED_MODEL_TYPES = frozenset({"llama", "qwen2"})


def lean_unsupported_reason(model: nn.Module) -> str | None:
    """Why the lean decoder cannot run `model` exactly, or None when it can."""
    config = model.config
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return f"model_type {getattr(config, 'model_type', None)!r} is not one of {sorted(SUPPORTED_MODEL_TYPES)}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r} (only silu)"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return f"rope_type {rope.get('rope_type', rope.get('type'))!r} (only default)"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "sliding-window attention layers"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    body = model.get_decoder()
    if type(getattr(body, "embed_tokens", None)) is not nn.Embedding or not hasattr(body, "rotary_emb"):
        return "decoder without a plain embed_tokens / rotary_emb"
    for module in body.modules():
        if module._forward_hooks or module._forward_pre_hooks:
            return f"forward hooks on {type(module).__name__}"
    for layer in body.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            if type(linear) is not nn.Linear:  # e.g. a LoRA layer (posttrain.models.lora): the HF path runs it
                return f"{type(linear).__module__}.{type(linear).__qualname__} instead of nn.Linear"
    return None


def rotary_tables(rotary: nn.Module, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """(cos, signed sin), each positions.shape + (D,), in `dtype`, from the same fp32 products
    `position * inv_freq` as HF's rotary module (so the angles are bit-identical).

    rotate_half(x) * sin = cat(-x2, x1) * sin = cat(x2, x1) * cat(-sin1, sin2): the sign moves into
    the table (exact: negation commutes with rounding), so callers use `swap_halves` with it."""
    freqs = positions[..., None].float() * rotary.inv_freq.float()  # (..., D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (..., D)
    cos = (emb.cos() * rotary.attention_scaling).to(dtype)
    sin = (emb.sin() * rotary.attention_scaling).to(dtype)
    half = sin.shape[-1] // 2
    return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """HF's Llama/Qwen2 RMSNorm: normalise in fp32, cast back, then scale. In fp32 torch's fused
    kernel gives the same result (one kernel instead of five); other dtypes follow HF's steps."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def swap_halves(x: Tensor) -> Tensor:
    """cat(x2, x1) over the last dim; with the signed sin table of `rotary_tables` this is HF's rotate_half."""
    half = x.shape[-1] // 2
    return torch.cat((x[..., half:], x[..., :half]), dim=-1)
