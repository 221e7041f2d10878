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
rank. The LM head scores each rank's share of the response tokens and the per-token log-probs and
entropies are gathered too (`split_head`); a critic's value head (one output) runs on every rank.
Every sp rank therefore computes the same loss of the same rows; the caller weights each rank's loss by 1/sp
(`posttrain.cluster.parallel.DataParallel.loss_share`), the gather's backward sums the sp ranks'
gradients of each slice, and the gradient reduction over ranks sums the rest, so the gradient is
exactly the one-process gradient (tests/cluster/test_ulysses.py).

The layers are the model's own modules (so FSDP gathers each sharded layer as in any forward, and
projections, norms and rotary embeddings are the model's), with positions of the whole sequence; only the attention function is this module's, registered with transformers' attention
interface and named by the model's config for the duration of the call. The attention mask is built
once for the whole sequence (`posttrain.models.lean_forward.training_attention_mask`: causal, within
a packed segment, real keys). Which group a forward splits over is a context variable
(`sequence_parallel(...)`), set by the role around its forwards, so nothing process-wide is left
behind and roles with different sizes can share a process.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AttentionInterface

from posttrain.models.lean_forward import training_attention_mask
from posttrain.models.moe import narrow_tokens
from posttrain.models.router_replay import narrow_layout


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
    config = model.config
    if not getattr(model, "_supports_attention_backend", False):
        return f"{type(model).__name__} does not run its attention through transformers' attention interface"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "sliding-window attention layers"
    if getattr(model.get_decoder(), "gradient_checkpointing", False):
        return "gradient checkpointing, whose recomputation in the backward would not split the sequence"
    heads = config.num_attention_heads
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


class _Gather(torch.autograd.Function):
    """Concatenate every sp rank's equal-sized piece along `dim`. Backward: this rank's piece of the
    gradient SUMMED over the ranks (each rank's loss used the whole gathered tensor)."""

    @staticmethod
    def forward(ctx, x: Tensor, sp: SequenceGroup, dim: int) -> Tensor:
        ctx.sp, ctx.dim = sp, dim
        pieces = [torch.empty_like(x) for _ in range(sp.size)]
        dist.all_gather(pieces, x.contiguous(), group=sp.group)
        return torch.cat(pieces, dim=dim)

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.sp.group)
        return grad.chunk(ctx.sp.size, dim=ctx.dim)[ctx.sp.rank].contiguous(), None, None


def split_head(
    hidden: Tensor, targets: Tensor, sp: SequenceGroup, head: Callable[[Tensor, Tensor], tuple[Tensor, Tensor | None]],
) -> tuple[Tensor, Tensor | None]:
    """`head(hidden, targets)` -> (log-probs (N,), entropy (N,) or None) with each sp rank scoring
    ceil(N/sp) of the N tokens, gathered to every rank. `hidden` (N, H) and `targets` (N,) are the
    same on every rank of the group (the gathered decoder states), so the LM head, the largest
    per-token cost after the decoder, is not computed sp times. The gather's backward sums the
    ranks' gradients of each piece, as for the decoder states (see the module docstring)."""
    N = hidden.shape[0]
    n = max(1, -(-N // sp.size))  # every rank sends a piece of n (padded): all_gather needs equal sizes
    start = min(sp.rank * n, N)
    logprobs, entropy = head(hidden[start : start + n], targets[start : start + n])

    def gathered(t: Tensor) -> Tensor:
        return _Gather.apply(F.pad(t, (0, n - t.shape[0])), sp, 0)[:N]  # (N,)

    return gathered(logprobs), (gathered(entropy) if entropy is not None else None)


def _pad_columns(t: Tensor, width: int, value: Tensor | int) -> Tensor:
    """t (K, W) padded on the right to `width` columns with `value` (a (K, 1) tensor or a number)."""
    extra = width - t.shape[1]
    if extra == 0:
        return t
    if isinstance(value, Tensor):
        return torch.cat([t, value + torch.arange(extra, device=t.device)[None]], dim=1)
    return F.pad(t, (0, extra), value=value)


ATTENTION_NAME = "posttrain_ulysses"
# The split and the whole-sequence mask of the running `ulysses_hidden_states` call: what the
# attention function registered below reads (HF calls it with this rank's slice of q, k, v).
_CALL: ContextVar[tuple[SequenceGroup, Tensor | None] | None] = ContextVar("posttrain_ulysses_call", default=None)


def ulysses_hidden_states(
    model: nn.Module, input_ids: Tensor, position_ids: Tensor, attention_mask: Tensor | None, sp: SequenceGroup
) -> Tensor:
    """Final-norm hidden states (K, W, H) of the whole sequence on every rank of `sp`, each rank
    running the model's own decoder on its W'/sp columns (W' = W rounded up to a multiple of sp).

    `attention_mask` (K, W), 1 = real token, or None (packed rows restart their positions at 0), as
    `posttrain.models.lean_forward.lean_hidden_states` takes them. The padding columns go at the
    end, with positions continuing the row's last one, and are cut from the result: as keys they
    come after every real token, so causal attention keeps them from every real query.

    The decoder runs through its modules (so FSDP gathers each layer as usual), with this module's
    attention function in place of the model's own for the call: the model's config names it only
    while the call runs. transformers builds no mask for an attention it does not know, so the
    mask of the whole sequence is built here once and handed to the attention function.
    """
    K, W = input_ids.shape
    padded = -(-W // sp.size) * sp.size
    ids = _pad_columns(input_ids, padded, 0)  # (K, W')
    positions = _pad_columns(position_ids, padded, position_ids[:, -1:] + 1)  # (K, W')
    mask_in = None if attention_mask is None else _pad_columns(attention_mask, padded, 0)
    mask = training_attention_mask(positions, mask_in)  # (K, 1, W', W') over the whole sequence, or None
    w = padded // sp.size
    mine = slice(sp.rank * w, (sp.rank + 1) * w)
    narrow_tokens(K, W, padded, mine, sp.group)  # an open router capture sees this rank's columns only
    narrow_layout(K, W, padded, mine, sp.group)  # so does a routing record/replay (posttrain.models.router_replay)
    config = model.config
    own, token = config._attn_implementation, _CALL.set((sp, mask))
    config._attn_implementation = ATTENTION_NAME
    try:
        x = model.get_decoder()(input_ids=ids[:, mine], position_ids=positions[:, mine], use_cache=False).last_hidden_state
    finally:
        config._attn_implementation = own
        _CALL.reset(token)
    return _Gather.apply(x, sp, 1)[:, :W]  # (K, W, H)


def ulysses_attention(
    module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
    dropout: float = 0.0, scaling: float | None = None, **kwargs: Any,
) -> tuple[Tensor, None]:
    """transformers' attention-function contract: q (K, heads, w, D), k and v (K, kv_heads, w, D) of
    this rank's columns; returns (K, w, heads, D). Attention runs over the whole sequence for
    heads/sp heads between two all-to-all exchanges (see the module docstring)."""
    call = _CALL.get()
    if call is None:
        raise RuntimeError(f"attention implementation {ATTENTION_NAME!r} runs only inside ulysses_hidden_states")
    sp, mask = call
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads % sp.size:  # too few kv heads to share out: every query head gets its own copy first
        key, value = _repeat_kv(key, heads // kv_heads), _repeat_kv(value, heads // kv_heads)
    q = _AllToAll.apply(query, sp, 1, 2)  # (K, heads/sp, W, D): this rank's heads, whole sequence
    k = _AllToAll.apply(key, sp, 1, 2)
    v = _AllToAll.apply(value, sp, 1, 2)
    group = q.shape[1] // k.shape[1]  # the local kv heads serve a contiguous block of query heads
    k, v = _repeat_kv(k, group), _repeat_kv(v, group)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=mask is None, scale=scaling)
    out = _AllToAll.apply(out, sp, 2, 1)  # (K, heads, w, D): every head, this rank's columns
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION_NAME, ulysses_attention)


def _repeat_kv(t: Tensor, group: int) -> Tensor:
    """(K, kv, S, D) -> (K, kv * group, S, D): head j * group + r is kv head j, as HF's repeat_kv."""
    if group == 1:
        return t
    K, kv, S, D = t.shape
    return t[:, :, None].expand(K, kv, group, S, D).reshape(K, kv * group, S, D)
