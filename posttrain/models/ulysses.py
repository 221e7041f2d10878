"""Ulysses sequence parallelism for the training forward: one sequence split over the ranks of a
sequence-parallel (sp) group, attention computed head by head over the whole sequence.

DeepSpeed-Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses: System Optimizations for Enabling
Training of Extreme Long Sequence Transformer Models", arXiv:2309.14509); verl's
`ulysses_sequence_parallel_size` is the same scheme. Each of the sp ranks holds a contiguous slice
of every row's (padded) sequence, W/sp columns. Everything outside attention is per token
(embedding, norms, projections, MLP), so it runs on the slice alone. Around attention:

    q, k, v  (K, heads, W/sp, D)  --all-to-all-->  (K, heads/sp, W, D)
    causal attention over the whole sequence, for this rank's heads
    out      (K, heads/sp, W, D)  --all-to-all-->  (K, heads, W/sp, D)

Grouped-query attention: when sp divides the kv heads each rank receives its own kv heads and
repeats them for its query heads (query head j * group + r uses kv head j, so a contiguous block of
query heads uses a contiguous block of kv heads); otherwise k and v are repeated to every query
head before the exchange. The number of query heads must be a multiple of sp.

The decoder's final hidden states are gathered back to the whole sequence, (K, W, H), on every sp
rank, and the LM head (or value head) runs on them as in one process. Every sp rank therefore
computes the same loss of the same rows; the caller weights each rank's loss by 1/sp
(`posttrain.cluster.parallel.DataParallel.loss_share`), the gather's backward sums the sp ranks'
gradients of each slice, and the gradient reduction over ranks sums the rest, so the gradient is
exactly the one-process gradient (tests/models/test_ulysses.py).

The arithmetic per layer is the lean forward's (`posttrain.models.lean_forward`: Llama/Qwen2
families, `lean_unsupported_reason`), with positions of the whole sequence for the rotary tables
and the attention mask, which is built once for the whole sequence. Which group a forward splits
over is a context variable (`sequence_parallel(...)`), set by the role around its forwards, so
nothing process-wide is left behind and roles with different sizes can share a process.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from posttrain.models.lean_ops import lean_unsupported_reason, rms_norm, rotary_tables, swap_halves


@dataclass(frozen=True)
class SequenceGroup:
    """This rank's place in its sequence-parallel group: rank r holds columns [r*w, (r+1)*w)."""

    rank: int
    size: int
    group: Any  # the torch.distributed process group of the sp ranks


_GROUP: ContextVar[SequenceGroup | None] = ContextVar("posttrain_sequence_parallel", default=None)


@contextmanager
def sequence_parallel(sp: SequenceGroup | None) -> Iterator[None]:
    """Split the training forwards inside the block over `sp` (None or size 1: no split)."""
    token = _GROUP.set(sp if sp is not None and sp.size > 1 else None)
    try:
        yield
    finally:
        _GROUP.reset(token)


def current_group() -> SequenceGroup | None:
    """The sp group the calling context splits its forwards over, or None."""
    return _GROUP.get()


def ulysses_unsupported_reason(model: nn.Module, sp_size: int) -> str | None:
    """Why `model` cannot run split over `sp_size` ranks, or None."""
    reason = lean_unsupported_reason(model)
    if reason is not None:
        return reason
    heads = model.config.num_attention_heads
    if heads % sp_size:
        return f"its {heads} attention heads do not divide over {sp_size} ranks"
    return None


class _AllToAll(torch.autograd.Function):
    """Split x into `size` chunks along `scatter_dim`, send chunk i to rank i, and concatenate the
    received chunks along `gather_dim` in rank order. Its backward is the inverse exchange."""

    @staticmethod
    def forward(ctx, x: Tensor, sp: SequenceGroup, scatter_dim: int, gather_dim: int) -> Tensor:
        ctx.sp, ctx.dims = sp, (scatter_dim, gather_dim)
        return _all_to_all(x, sp, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx, grad: Tensor):
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad, ctx.sp, gather_dim, scatter_dim), None, None, None


def _all_to_all(x: Tensor, sp: SequenceGroup, scatter_dim: int, gather_dim: int) -> Tensor:
    sends = [c.contiguous() for c in x.chunk(sp.size, dim=scatter_dim)]
    receives = [torch.empty_like(sends[0]) for _ in range(sp.size)]
    dist.all_to_all(receives, sends, group=sp.group)
    return torch.cat(receives, dim=gather_dim)


class _GatherSequence(torch.autograd.Function):
    """Concatenate every sp rank's slice along dim 1. Backward: this rank's slice of the gradient
    SUMMED over the ranks (each rank's loss used the whole gathered tensor)."""

    @staticmethod
    def forward(ctx, x: Tensor, sp: SequenceGroup) -> Tensor:
        ctx.sp = sp
        pieces = [torch.empty_like(x) for _ in range(sp.size)]
        dist.all_gather(pieces, x.contiguous(), group=sp.group)
        return torch.cat(pieces, dim=1)

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.sp.group)
        return grad.chunk(ctx.sp.size, dim=1)[ctx.sp.rank].contiguous(), None


def _pad_columns(t: Tensor, width: int, value: Tensor | int) -> Tensor:
    """t (K, W) padded on the right to `width` columns with `value` (a (K, 1) tensor or a number)."""
    extra = width - t.shape[1]
    if extra == 0:
        return t
    if isinstance(value, Tensor):
        return torch.cat([t, value + torch.arange(extra, device=t.device)[None]], dim=1)
    return F.pad(t, (0, extra), value=value)


def ulysses_hidden_states(
    model: nn.Module, input_ids: Tensor, position_ids: Tensor, attention_mask: Tensor | None, sp: SequenceGroup
) -> Tensor:
    """Final-norm hidden states (K, W, H) of the whole sequence on every rank of `sp`, each rank
    computing the decoder on its W'/sp columns (W' = W rounded up to a multiple of sp).

    Same contract as `posttrain.models.lean_forward.lean_hidden_states`. The padding columns go at
    the end, with positions continuing the row's last one, and are cut from the result: as keys they
    come after every real token, so causal attention keeps them from every real query.
    """
    from posttrain.models.lean_forward import _attention_mask

    K, W = input_ids.shape
    padded = -(-W // sp.size) * sp.size
    ids = _pad_columns(input_ids, padded, 0)  # (K, W')
    positions = _pad_columns(position_ids, padded, position_ids[:, -1:] + 1)  # (K, W')
    mask_in = None if attention_mask is None else _pad_columns(attention_mask, padded, 0)
    mask = _attention_mask(positions, mask_in)  # (K, 1, W', W') over the whole sequence, or None
    w = padded // sp.size
    mine = slice(sp.rank * w, (sp.rank + 1) * w)
    body, config = model.get_decoder(), model.config
    x = body.embed_tokens(ids[:, mine])  # (K, w, H)
    cos, sin = rotary_tables(body.rotary_emb, positions[:, mine], x.dtype)  # (K, w, D) each
    cos, sin = cos[:, None], sin[:, None]  # (K, 1, w, D)
    for layer in body.layers:
        x = _ulysses_layer(x, cos, sin, mask, layer, config.num_attention_heads, config.num_key_value_heads, sp)
    x = rms_norm(x, body.norm.weight, body.norm.variance_epsilon)  # (K, w, H)
    return _GatherSequence.apply(x, sp)[:, :W]  # (K, W, H)


def _ulysses_layer(
    x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, layer: nn.Module, heads: int, kv_heads: int,
    sp: SequenceGroup,
) -> Tensor:
    """One decoder layer on this rank's slice x (K, w, H), as `lean_forward._layer` computes it."""
    attn, mlp = layer.self_attn, layer.mlp
    K, w = x.shape[:2]
    D = cos.shape[-1]
    h = rms_norm(x, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
    q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias).view(K, w, heads, D).transpose(1, 2)
    k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias).view(K, w, kv_heads, D).transpose(1, 2)
    v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias).view(K, w, kv_heads, D).transpose(1, 2)
    q = q * cos + swap_halves(q) * sin  # (K, heads, w, D)
    k = k * cos + swap_halves(k) * sin  # (K, kv_heads, w, D)
    if kv_heads % sp.size:  # too few kv heads to share out: every query head gets its own copy first
        k, v = _repeat_kv(k, heads // kv_heads), _repeat_kv(v, heads // kv_heads)
    q = _AllToAll.apply(q, sp, 1, 2)  # (K, heads/sp, W, D): this rank's heads, whole sequence
    k = _AllToAll.apply(k, sp, 1, 2)
    v = _AllToAll.apply(v, sp, 1, 2)
    group = q.shape[1] // k.shape[1]  # the local kv heads serve a contiguous block of query heads
    k, v = _repeat_kv(k, group), _repeat_kv(v, group)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=attn.scaling)
    out = _AllToAll.apply(out, sp, 2, 1)  # (K, heads, w, D): every head, this rank's columns
    x = x + F.linear(out.transpose(1, 2).reshape(K, w, heads * D), attn.o_proj.weight, attn.o_proj.bias)
    h = rms_norm(x, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon)
    gate = F.silu(F.linear(h, mlp.gate_proj.weight, mlp.gate_proj.bias))
    return x + F.linear(gate * F.linear(h, mlp.up_proj.weight, mlp.up_proj.bias), mlp.down_proj.weight, mlp.down_proj.bias)


def _repeat_kv(t: Tensor, group: int) -> Tensor:
    """(K, kv, S, D) -> (K, kv * group, S, D): head j * group + r is kv head j, as HF's repeat_kv."""
    if group == 1:
        return t
    K, kv, S, D = t.shape
    return t[:, :, None].expand(K, kv, group, S, D).reshape(K, kv * group, S, D)
