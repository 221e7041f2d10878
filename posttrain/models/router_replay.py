"""Routing replay (R2) for Hugging Face mixture-of-experts models: record each MoE layer's top-k
expert choice of every token in one forward pass, and make later forward passes route every token
to those same experts.

Why: the PPO ratio pi_theta / pi_old compares two forwards of the same tokens. In an MoE model a
small weight change can flip a token's top-k experts, and then the ratio compares two different
sub-networks, not one network at two parameter values. Routing replay (verl's
``router_replay.mode: R2``, after slime's routing replay) records the experts of every token in the
old-log-prob forward and replays them in the update's forwards, so the ratio's numerator and
denominator route alike and the first update forward reproduces the old log-probs exactly.

What is replayed is the choice (the expert indices), not the mixing weights: a replayed router
still computes its logits from the current weights, and the weight of each replayed expert is what
the router's own rule gives at those indices (softmax over all experts, taken at the replayed
experts, renormalised over them where the family renormalises its top-k), as verl's patched
Megatron router gathers the current scores at the replayed indices. So the router keeps its
gradient.

Token layout (`RouteLayout`): every row's real tokens in order, prompt then response, are its
sequence positions 0, 1, ...; the recorded routes of a batch are (B, S, L, K) with the j-th real
token of row b at [b, j] (right-padded with zeros), so they do not depend on how a forward cut,
trimmed or packed the rows. The forward helpers (`posttrain.models.logprobs`) report, for the slots
of the decoder input about to run, which row and position each holds (`note_layout`); slots that
hold padding route as the model routes them (their outputs are never read).

Under Ulysses each rank routes its columns of the rows (`narrow_layout`); a record sums the
ranks' parts, and a replay looks up its own columns' tokens.

The hooks stay registered for the whole `replay_routes` block, including backward passes that
recompute a gradient-checkpointed layer, so a recomputation routes as its forward did. The open
block is a module-level slot rather than a ContextVar because those recomputations may run on
autograd's own threads (one per GPU), which do not see the caller's context.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor, nn

from posttrain.errors import ConfigError
from posttrain.models.moe import router_modules, router_top_k

KEY = "actor.router_replay.mode"


def _renormalised(module: nn.Module) -> bool:
    return bool(getattr(module, "norm_topk_prob", False))


def _softmax_weights(always_normalise: bool, cast: bool) -> Callable[[nn.Module, Tensor, Tensor], Tensor]:
    """Weights of the replayed experts `index` (N, K) from the router's logits (N, E): its softmax
    over all experts, in float32, taken at them (and divided by their sum where the family
    renormalises its top-k: always, or per the module's norm_topk_prob)."""
    def weights(module: nn.Module, logits: Tensor, index: Tensor) -> Tensor:
        chosen = torch.softmax(logits, dim=-1, dtype=torch.float32).gather(-1, index)  # (N, K)
        if always_normalise or _renormalised(module):
            chosen = chosen / chosen.sum(dim=-1, keepdim=True)
        return chosen.to(logits.dtype) if cast else chosen
    return weights


def _topk_softmax(module: nn.Module, logits: Tensor, index: Tensor) -> Tensor:
    """GPT-OSS: softmax over the chosen experts' logits only."""
    return torch.softmax(logits.gather(-1, index), dim=-1, dtype=logits.dtype)


# The router classes (transformers' names) whose weight rule is known: each rule mirrors the
# class's own forward at the replayed indices. Other routers (DeepSeek's grouped sigmoid, ...) are refused.
WEIGHT_RULES: dict[str, Callable[[nn.Module, Tensor, Tensor], Tensor]] = {
    "Qwen3MoeTopKRouter": _softmax_weights(always_normalise=False, cast=True),
    "Qwen2MoeTopKRouter": _softmax_weights(always_normalise=False, cast=True),
    "OlmoeTopKRouter": _softmax_weights(always_normalise=False, cast=True),
    "MixtralTopKRouter": _softmax_weights(always_normalise=True, cast=False),
    "GptOssTopKRouter": _topk_softmax,
}


def replay_routers(model: nn.Module, key: str = KEY) -> list[nn.Module]:
    """The model's MoE routers in layer order, each of a family `WEIGHT_RULES` knows; a
    ConfigError naming `key` for a dense model or another router family."""
    routers = [module for module, _index in router_modules(model)]
    if not routers or router_top_k(model) is None:
        raise ConfigError(
            f"{key}: R2 replays a mixture-of-experts model's routing, and {type(model).__name__} has no MoE router "
            "(transformers' router_logits outputs with num_experts_per_tok); set it to disabled for a dense model")
    unknown = sorted({type(r).__name__ for r in routers} - set(WEIGHT_RULES))
    if unknown:
        raise ConfigError(
            f"{key}: R2 needs the routing rule of the model's routers to replay them, and posttrain knows it for "
            f"{', '.join(sorted(WEIGHT_RULES))}, not for {', '.join(unknown)}; set it to disabled for this model")
    return routers


@dataclass
class RouteLayout:
    """Where the slots of the decoder input (flattened in the order the routers see them) come from:
    `rows` (N,) the row of the micro-batch, `positions` (N,) the sequence position in that row, both
    -1 on slots that hold no real token."""

    rows: Tensor
    positions: Tensor

    @staticmethod
    def of_padded(attention_mask: Tensor) -> "RouteLayout":
        """Padded rows (b, S'): slot (i, s) is row i's real token number (cumulative count - 1)."""
        real = attention_mask > 0
        pos = torch.cumsum(real.long(), dim=1) - 1  # (b, S')
        rows = torch.arange(real.shape[0], device=real.device)[:, None].expand_as(pos)
        return RouteLayout(torch.where(real, rows, -1).reshape(-1), torch.where(real, pos, -1).reshape(-1))


@dataclass
class RouteSession:
    """The open `record_routes` / `replay_routes` block: the layout of the forward about to run,
    what the routers chose (record) or must choose (replay: (b, S, L, K) of the micro-batch's rows)."""

    routers: list[nn.Module]
    replay: bool
    layout: RouteLayout | None = None
    routes: Tensor | None = None
    chosen: dict[int, Tensor] = field(default_factory=dict)  # record: layer -> (N, K) indices
    width: int = 1  # record: the longest row's real tokens in the forward about to run
    group: Any = None  # Ulysses: the ranks that route the other columns of the same rows
    replayed: set[int] = field(default_factory=set)  # replay: the layers that replayed since set_routes


_SESSION: list[RouteSession] = []  # at most one open block; a plain list, not a ContextVar: see the module doc


def note_layout(layout: RouteLayout) -> None:
    """The forward helpers call this before the decoder runs; it drops what earlier (probe)
    forwards of the block recorded."""
    if _SESSION:
        session = _SESSION[0]
        session.layout, session.group = layout, None
        session.width = int(layout.positions.max()) + 1 if bool((layout.rows >= 0).any()) else 1
        session.chosen.clear()


def narrow_layout(rows: int, width: int, padded: int, columns: slice, group: Any) -> None:
    """Ulysses (`posttrain.models.ulysses`): this rank's decoder runs only `columns` of the (rows,
    padded) input whose layout `note_layout` recorded; keep that part, and the group that routes
    the rest (a record is summed over it: every token is routed on exactly one of its ranks)."""
    if not _SESSION or _SESSION[0].layout is None:
        return
    session = _SESSION[0]

    def cut(t: Tensor) -> Tensor:
        t = torch.cat([t.reshape(rows, width), t.new_full((rows, padded - width), -1)], dim=1)  # (rows, padded)
        return t[:, columns].reshape(-1)
    session.layout, session.group = RouteLayout(cut(session.layout.rows), cut(session.layout.positions)), group


def _hook(session: RouteSession, layer: int, module: nn.Module):
    rule = WEIGHT_RULES[type(module).__name__]

    def hook(_module: nn.Module, _inputs: Any, output: Any) -> Any:
        logits, weights, index = output  # (N, E), (N, K), (N, K): the router's own choice
        layout = session.layout
        if layout is None or layout.rows.shape[0] != index.shape[0]:
            return None  # a probe forward (posttrain.models.packing.packing_supported): not the batch's
        if not session.replay:
            session.chosen[layer] = index.detach()
            return None
        session.replayed.add(layer)
        real = layout.rows >= 0  # (N,)
        wanted = session.routes[layout.rows.clamp(min=0), layout.positions.clamp(min=0), layer].to(index.device, torch.long)
        replayed = torch.where(real[:, None].to(index.device), wanted, index)  # (N, K): padding keeps its own
        return logits, rule(module, logits, replayed).to(weights.dtype), replayed
    return hook


@contextmanager
def _session(model: nn.Module, replay: bool) -> Iterator[RouteSession]:
    if _SESSION:
        raise RuntimeError("router replay: a record/replay block is already open")
    session = RouteSession(replay_routers(model), replay)
    handles = [r.register_forward_hook(_hook(session, i, r)) for i, r in enumerate(session.routers)]
    _SESSION.append(session)
    try:
        yield session
    finally:
        _SESSION.clear()
        for handle in handles:
            handle.remove()


@contextmanager
def record_routes(model: nn.Module) -> Iterator[RouteSession]:
    """Record the routers' choices of the forwards run inside; read each with `recorded`."""
    with _session(model, replay=False) as session:
        yield session


@contextmanager
def replay_routes(model: nn.Module) -> Iterator[RouteSession]:
    """Route the forwards (and checkpoint recomputations) run inside as `set_routes` says."""
    with _session(model, replay=True) as session:
        yield session


def set_routes(session: RouteSession, routes: Tensor) -> None:
    """The (b, S, L, K) recorded routes of the micro-batch whose forward runs next (the batch may
    keep them in host memory, as verl does: only this micro-batch's go to the model's device)."""
    device = next(session.routers[0].parameters()).device
    session.routes, session.layout = routes.to(device, non_blocking=True), None
    session.replayed.clear()


def check_replayed(session: RouteSession) -> None:
    """After a replayed forward: every router replayed (a forward path that reports no token layout
    would otherwise route on its own, silently)."""
    if len(session.replayed) != len(session.routers):
        raise RuntimeError(f"router replay: {len(session.replayed)} of {len(session.routers)} MoE routers replayed the recorded "
                           "experts; the forward reported no token layout (posttrain.models.router_replay.note_layout)")


def recorded(session: RouteSession, rows: int, dtype: torch.dtype) -> Tensor:
    """(rows, S, L, K) the last forward's choices in the row layout, S its longest row's real tokens;
    0 where a row has fewer."""
    layout = session.layout
    if layout is None or len(session.chosen) != len(session.routers):
        raise RuntimeError("router replay: the forward reported no token layout or not every router ran")
    real = layout.rows >= 0
    index = torch.stack([session.chosen[i] for i in range(len(session.routers))], dim=1)  # (N, L, K)
    out = torch.zeros((rows, session.width, *index.shape[1:]), dtype=torch.int32, device=index.device)
    out[layout.rows[real], layout.positions[real]] = index[real.to(index.device)].to(torch.int32)
    if session.group is not None:  # Ulysses: each token's experts sit on the one rank that routed it, zeros elsewhere
        import torch.distributed as dist

        dist.all_reduce(out, group=session.group)
    return out.to(dtype)


def route_dtype(model: nn.Module) -> torch.dtype:
    """uint8 while expert indices fit (as verl stores them), else int32."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    experts = max(int(getattr(config, name, 0) or 0) for name in ("num_experts", "num_local_experts", "n_routed_experts"))
    return torch.uint8 if experts <= 256 else torch.int32
