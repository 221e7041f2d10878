"""The router logits of a Hugging Face mixture-of-experts model, captured during one forward pass.

transformers' MoE families declare which module's output is "router_logits" (the class attribute
``_can_record_outputs``: an ``OutputRecorder`` naming the router class and the output's index);
``output_router_logits=True`` collects exactly those tensors with forward hooks. posttrain's
forwards run the decoder directly (`posttrain.models.logprobs`), so `capture_router_logits` hooks
the same modules itself while its block is open, and the forward helpers report which of the slots
they fed the decoder are real tokens (`note_tokens`): padding must not count in the balance.

Hooks collect only inside the block: a gradient-checkpointed layer runs its forward again during
the backward pass, outside it, and that second pass adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from posttrain.errors import ConfigError


@dataclass(frozen=True)
class RouterWeights:
    """The weights of the router losses a role adds to its loss: load balancing (with the experts per
    token it counts) and z-loss. Both 0: the forward captures nothing."""

    aux: float = 0.0  # the role's moe_aux_loss_coef, resolved against the model
    z: float = 0.0  # the role's moe_z_loss_coef
    top_k: int = 0  # experts per token, when aux > 0

    @property
    def on(self) -> bool:
        return self.aux > 0 or self.z > 0


@dataclass
class RouterCapture:
    """What one forward pass gave: per-layer router logits (N, E) and the (N,) real-token mask."""

    logits: list[Tensor] = field(default_factory=list)
    token_mask: Tensor | None = None
    group: Any = None  # Ulysses: the process group whose ranks ran the other columns of the same rows


_ACTIVE: ContextVar[RouterCapture | None] = ContextVar("posttrain_router_capture", default=None)


def _text_config(model: nn.Module) -> Any:
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def router_modules(model: nn.Module) -> list[tuple[nn.Module, int]]:
    """(router module, index of its logits in the module's output) for every MoE layer; [] for a
    dense model or a family that declares no router logits."""
    recorder = (getattr(type(model), "_can_record_outputs", None) or {}).get("router_logits")
    if recorder is None:  # the causal-LM wrapper may leave the declaration to its base model
        base = getattr(model, "model", None)
        recorder = (getattr(type(base), "_can_record_outputs", None) or {}).get("router_logits") if base is not None else None
    if recorder is None:
        return []
    target = getattr(recorder, "target_class", recorder)
    index = getattr(recorder, "index", 0) or 0
    layer_name = getattr(recorder, "layer_name", None)
    return [(m, index) for name, m in model.named_modules()
            if isinstance(target, type) and isinstance(m, target) and (layer_name is None or name.endswith(layer_name))]


def router_top_k(model: nn.Module) -> int | None:
    """Experts per token of the model's routers (config ``num_experts_per_tok``), or None."""
    k = getattr(_text_config(model), "num_experts_per_tok", None)
    return k if isinstance(k, int) and k > 0 else None


def router_aux_loss_coef(model: nn.Module) -> float:
    """The model's own load-balancing coefficient (config ``router_aux_loss_coef``), 0 without one."""
    coef = getattr(_text_config(model), "router_aux_loss_coef", None)
    return float(coef) if isinstance(coef, (int, float)) and not isinstance(coef, bool) else 0.0


@contextmanager
def capture_router_logits(model: nn.Module) -> Iterator[RouterCapture]:
    """Collect every router's logits of the forward passes run inside the block."""
    capture = RouterCapture()

    def make_hook(index: int):
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
            if _ACTIVE.get() is capture:
                capture.logits.append(output[index] if isinstance(output, (tuple, list)) else output)
        return hook

    handles = [module.register_forward_hook(make_hook(index)) for module, index in router_modules(model)]
    token = _ACTIVE.set(capture)
    try:
        yield capture
    finally:
        _ACTIVE.reset(token)
        for handle in handles:
            handle.remove()


def note_tokens(real: Tensor) -> None:
    """Record which token slots of the decoder input about to run are real (any shape, flattened in
    the order the routers see them), when a capture is open. Router logits collected before it came
    from probe forwards (`posttrain.models.packing.packing_supported` on a tiny input) and are dropped."""
    capture = _ACTIVE.get()
    if capture is not None:
        capture.logits.clear()
        capture.token_mask = real.reshape(-1)


def narrow_tokens(rows: int, width: int, padded: int, columns: slice, group: Any) -> None:
    """Ulysses (`posttrain.models.ulysses`): this rank's decoder runs only `columns` of the (rows,
    padded) input whose (rows, width) real-token mask `note_tokens` recorded; keep that part of it,
    and the group holding the rest (the router loss sums its counts over it)."""
    capture = _ACTIVE.get()
    if capture is None or capture.token_mask is None:
        return
    real = capture.token_mask.reshape(rows, width)
    real = torch.cat([real, real.new_zeros(rows, padded - width)], dim=1)  # (rows, padded): padding columns
    capture.token_mask, capture.group = real[:, columns].reshape(-1), group


def group_sum(group: Any):
    """A sum over the ranks of `group` (no gradient: the router loss reduces counts with it)."""
    import torch.distributed as dist

    def reduce(t: Tensor) -> Tensor:
        t = t.detach().clone()
        dist.all_reduce(t, group=group)
        return t
    return reduce


def router_loss_settings(model: nn.Module, coef: float | None, key: str = "actor.moe_aux_loss_coef") -> tuple[float, int]:
    """(coefficient, top-k) of a role's router load-balancing loss for `model` (`key`, e.g.
    actor.moe_aux_loss_coef: None takes the model's router_aux_loss_coef). (0.0, 0) when it is off; a
    positive coefficient for a model without exposed routers is a ConfigError."""
    resolved = router_aux_loss_coef(model) if coef is None else float(coef)
    if resolved == 0.0:
        return 0.0, 0
    source = f"{key}: null, the model's router_aux_loss_coef," if coef is None else key
    routers, top_k = router_modules(model), router_top_k(model)
    if not routers or top_k is None:
        raise ConfigError(
            f"{source} is {resolved}, but {type(model).__name__} exposes no mixture-of-experts router logits (transformers' "
            "output_router_logits) with a num_experts_per_tok: the router load-balancing loss needs an MoE model such as "
            f"Qwen3-MoE or Mixtral; set {key}: 0 for this model")
    return resolved, top_k


def router_z_setting(model: nn.Module, coef: float, key: str = "actor.moe_z_loss_coef") -> float:
    """The weight of a role's router z-loss for `model` (`key`, e.g. actor.moe_z_loss_coef); a
    positive one for a model without exposed routers is a ConfigError."""
    if coef and not router_modules(model):
        raise ConfigError(
            f"{key} is {coef}, but {type(model).__name__} exposes no mixture-of-experts router logits (transformers' "
            f"output_router_logits): the router z-loss needs an MoE model such as Qwen3-MoE or Mixtral; set {key}: 0 for this model")
    return float(coef)
