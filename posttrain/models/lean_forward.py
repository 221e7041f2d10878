"""A lean training forward for Llama/Qwen2-family decoders: the HF modules' arithmetic as a short
list of differentiable torch ops on their own parameters, for the actor update and log-prob passes.

Why: the HF modules spend a training step partly outside the matmuls (RMSNorm as five elementwise
kernels, rotary by negation and concatenation, the SiLU MLP's products, mask building, module
bookkeeping). Measured (docs/performance.md, "Where the time goes" and "Opt-in"): at the benchmark's sizes the
module overhead costs nothing measurable -- these ops run eagerly take the HF decoder's time to
0.1 % -- because the remaining cost is memory traffic of elementwise ops on activations that do not
stay in cache. What removes it is fusion, so mode "compiled" compiles one layer (parameters passed
as tensors, so one graph serves every layer, dynamic shapes) with `torch.compile`: the actor update
went from 0.658 to 0.603 s (1 thread). The ops, each as HF's modules compute it:

- the HF module's parameters are read at call time (nothing copied, autograd reaches them as is);
- RMSNorm: `F.rms_norm` in fp32 (same result as HF's steps), HF's steps in other dtypes
  (`posttrain.models.lean_ops.rms_norm`, shared with the decoder);
- rotary: cos/sin from the same fp32 products `position * inv_freq` as HF's rotary module, with
  the sign of `rotate_half` moved into the sin table (exact, as in the lean decoder);
- attention: `F.scaled_dot_product_attention` with `is_causal` when every row is one causal
  sequence with no padding, else a boolean mask built once per call: causal, within the same
  packed segment (a segment starts where the position id is 0, as in transformers' packed-sequence
  detection), keys that are real tokens; every query also sees itself, so a padding query gets a
  finite (unused) row instead of NaN, which would otherwise leak into gradients through backward;
  grouped-query heads by repeating keys and values (as HF's `repeat_kv`);
- MLP: `F.silu(gate) * up`, then down.

Supported: what `posttrain.models.lean_ops.lean_unsupported_reason` accepts, no attention
dropout while training, no gradient checkpointing on the decoder. Otherwise callers use the HF
decoder (`lean_forward_reason` says why). Exactness (tests/models/test_lean_forward.py):
response log-probs equal the HF path's to 1e-5 in fp32 and parameter gradients to 1e-5 relative,
padded and packed, with GQA, biases, tied embeddings and Llama; compiled equals eager likewise.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posttrain.models.lean_ops import lean_unsupported_reason, rms_norm, rotary_tables, swap_halves


# Which forward the training-side passes use for supported models: "off" (HF's decoder), "eager"
# (this module's ops), "compiled" (the same ops with each layer compiled by `torch.compile`, which
# fuses the elementwise work; falls back to "eager" when compiling fails). Off by default: eager
# alone measured no faster than HF's decoder (docs/performance.md). A context variable, not a module
# setting: each role (actor, reference, critic) runs its forwards inside `lean_mode(...)` with its
# own choice (`actor.use_torch_compile`), so roles sharing a process never see each other's.
MODES = ("off", "eager", "compiled")
_MODE: ContextVar[str] = ContextVar("posttrain_lean_forward", default="off")
_compiled_layer = None
_compile_failed = False  # a fact about this process's compiler, learnt once: later calls run eager


@contextmanager
def lean_mode(mode: str) -> Iterator[None]:
    """Run the forwards inside the block with lean forward `mode` (one of `MODES`)."""
    if mode not in MODES:
        raise ValueError(f"lean forward mode {mode!r}: use one of {', '.join(MODES)}")
    token = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(token)


def current_mode() -> str:
    """The lean forward mode of the calling context ("off" outside any `lean_mode` block)."""
    return _MODE.get()


def lean_forward_reason(model: nn.Module) -> str | None:
    """Why `lean_hidden_states` cannot stand in for `model.get_decoder()` exactly, or None."""
    if _MODE.get() == "off":
        return "off (no lean_mode block, or lean_mode('off'))"
    reason = lean_unsupported_reason(model)
    if reason is not None:
        return reason
    body = model.get_decoder()
    if body.training and float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0.0:
        return "attention dropout while training"
    if getattr(body, "gradient_checkpointing", False) and body.training:
        return "gradient checkpointing"
    return None


def training_attention_mask(position_ids: Tensor, attention_mask: Tensor | None) -> Tensor | None:
    """(K, 1, W, W) bool, True = attend; None when plain causal attention is exact (no padding
    and, without a mask, one sequence per row starting at position 0)."""
    K, W = position_ids.shape
    cols = torch.arange(W, device=position_ids.device)
    allowed = (cols[None, :] <= cols[:, None])[None]  # (1, W queries, W keys): causal
    if attention_mask is not None:  # padded rows, one sequence each (HF ignores packing here too)
        if bool(attention_mask.bool().all()):
            return None
        allowed = allowed & attention_mask.bool()[:, None, :]
    else:
        starts = position_ids == 0  # (K, W)
        if bool(starts[:, 0].all()) and int(starts.sum()) == K:
            return None
        segment = torch.cumsum(starts.long(), dim=1)  # (K, W): packed sequence index within the row
        allowed = allowed & (segment[:, :, None] == segment[:, None, :])
    allowed = allowed | torch.eye(W, dtype=torch.bool, device=position_ids.device)[None]
    return allowed[:, None]  # (K, 1, W, W)


def lean_hidden_states(
    model: nn.Module, input_ids: Tensor, position_ids: Tensor, attention_mask: Tensor | None = None
) -> Tensor:
    """Final-norm hidden states (K, W, H) of `model`'s decoder for ids (K, W) at positions (K, W).

    `attention_mask` (K, W), 1 = real token, or None; packed rows are told apart by position ids
    restarting at 0. Call only when `lean_forward_reason(model)` is None.
    """
    body = model.get_decoder()
    config = model.config
    K, W = input_ids.shape
    x = body.embed_tokens(input_ids)  # (K, W, H); the module keeps padding_idx's gradient rule
    cos, sin = rotary_tables(body.rotary_emb, position_ids, x.dtype)  # (K, W, D) each
    cos, sin = cos[:, None], sin[:, None]  # (K, 1, W, D): broadcast over heads
    mask = training_attention_mask(position_ids, attention_mask)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    for layer in body.layers:
        attn, mlp = layer.self_attn, layer.mlp
        weights = tuple(
            t for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
            for t in (m.weight, m.bias)
        )
        norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
        eps = (layer.input_layernorm.variance_epsilon, layer.post_attention_layernorm.variance_epsilon)
        x = _run_layer(x, cos, sin, mask, weights, norms, eps, heads, kv_heads, attn.scaling)
    return rms_norm(x, body.norm.weight, body.norm.variance_epsilon)


def _run_layer(*args) -> Tensor:
    """`_layer`, compiled in "compiled" mode: one graph for every layer (parameters are arguments,
    not modules, so dynamo does not specialise on each layer), dynamic shapes, built on first use."""
    global _compiled_layer, _compile_failed
    if _MODE.get() != "compiled" or _compile_failed:
        return _layer(*args)
    if _compiled_layer is None:
        _compiled_layer = torch.compile(_layer, dynamic=True)
    try:
        return _compiled_layer(*args)
    except Exception as error:  # no compiler, unsupported backend...: the same arithmetic uncompiled
        warnings.warn(f"posttrain lean forward: torch.compile failed ({type(error).__name__}: {error}); using eager ops")
        _compile_failed = True
        return _layer(*args)


def _layer(
    x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, weights: tuple, norms: tuple, eps: tuple,
    heads: int, kv_heads: int, scaling: float,
) -> Tensor:
    """One decoder layer on x (K, W, H): pre-norm attention and pre-norm SiLU MLP, with residuals.

    `weights`: (weight, bias or None) of q, k, v, o, gate, up, down; `norms`/`eps`: the two RMSNorms.
    """
    wq, bq, wk, bk, wv, bv, wo, bo, wg, bg, wu, bu, wd, bd = weights
    K, W = x.shape[:2]
    D = cos.shape[-1]
    h = rms_norm(x, norms[0], eps[0])
    q = F.linear(h, wq, bq).view(K, W, heads, D).transpose(1, 2)
    k = F.linear(h, wk, bk).view(K, W, kv_heads, D).transpose(1, 2)
    v = F.linear(h, wv, bv).view(K, W, kv_heads, D).transpose(1, 2)
    q = q * cos + swap_halves(q) * sin  # (K, heads, W, D)
    k = k * cos + swap_halves(k) * sin  # (K, kv_heads, W, D)
    if heads != kv_heads:  # head j * group + r uses kv head j, as HF's repeat_kv
        group = heads // kv_heads
        k = k[:, :, None].expand(K, kv_heads, group, W, D).reshape(K, heads, W, D)
        v = v[:, :, None].expand(K, kv_heads, group, W, D).reshape(K, heads, W, D)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=scaling)
    x = x + F.linear(out.transpose(1, 2).reshape(K, W, heads * D), wo, bo)
    h = rms_norm(x, norms[1], eps[1])
    return x + F.linear(F.silu(F.linear(h, wg, bg)) * F.linear(h, wu, bu), wd, bd)
