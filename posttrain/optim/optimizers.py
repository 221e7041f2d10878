"""The optimizers a training role can use, built by name from torch.optim.

``optim.optimizer`` names one (verl's ``optim.optimizer`` holds torch.optim class names: AdamW, Adam,
SGD; the dialect loaders lower-case them):

- ``adamw``: Adam with decoupled weight decay (Loshchilov & Hutter, Decoupled Weight Decay
  Regularization, ICLR 2019): each step also subtracts lr x weight_decay x weight.
- ``adam``: Adam (Kingma & Ba, ICLR 2015); weight_decay is an L2 term added to the gradient, so it is
  rescaled by the adaptive denominator like the gradient is.
- ``sgd``: stochastic gradient descent; weight_decay is L2 as in adam. Momentum and Nesterov come
  through ``optim.override_optimizer_config`` ({momentum: 0.9, nesterov: true}).

``optim.decay_bias_and_norm: false`` exempts biases and one-dimensional parameters (norm weights) from
weight decay, as Megatron-LM's optimizer does (megatron.core.optimizer: a parameter whose name ends
in ``.bias`` or that has one dimension joins a group with weight decay 0); verl's Megatron trainer
trains that way.

Whatever the optimizer, its state is what ``state_dict()`` returns, so checkpoints save and restore
it the same way (posttrain.checkpoint).
"""

from __future__ import annotations

from typing import Any, Collection, Iterable

import torch

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW,
    "adam": torch.optim.Adam,
    "sgd": torch.optim.SGD,
}
ADAM_FAMILY = ("adamw", "adam")  # the optimizers that take betas and eps

# Where torch's fused kernels run (they raise on anything else).
FUSED_DEVICES = ("cpu", "cuda")
FUSED_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def build_optimizer(
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    fused: bool = False,
    name: str = "adamw",
    extra: dict[str, Any] | None = None,
    no_decay: Collection[torch.nn.Parameter] = (),
) -> torch.optim.Optimizer:
    """Optimizer `name` over the parameters that require gradients.

    `betas` and `eps` reach adamw and adam only; `extra` holds further constructor arguments
    (optim.override_optimizer_config, checked against the constructor when the config loads).
    `fused` uses torch's fused kernel (`optim.fused`): one pass per tensor instead of a dozen
    elementwise ops, the same update up to float rounding; measured for AdamW at 4.2M parameters on
    2 CPU threads, clip + step took 8-9 ms instead of 30-34 ms (docs/performance.md). It needs
    floating-point parameters on CPU or CUDA. The parameters in `no_decay` form a second group with
    weight decay 0 (`exempt_from_decay`)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    trainable = [p for p in params if p.requires_grad]
    if fused:
        unsupported = sorted({f"{p.dtype} on {p.device.type}" for p in trainable if p.device.type not in FUSED_DEVICES or p.dtype not in FUSED_DTYPES})
        if unsupported:
            raise ValueError(f"optim.fused: torch's fused {name} does not run on {', '.join(unsupported)}; set optim.fused to false")
    kwargs: dict[str, Any] = {"lr": lr, "weight_decay": weight_decay, "fused": True if fused else None}
    if name in ADAM_FAMILY:
        kwargs.update(betas=betas, eps=eps)
    exempt = {id(p) for p in no_decay}
    groups: Any = trainable
    if exempt and weight_decay > 0:
        groups = [{"params": [p for p in trainable if id(p) not in exempt]},
                  {"params": [p for p in trainable if id(p) in exempt], "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
    return OPTIMIZERS[name](groups, **kwargs, **(extra or {}))


def exempt_from_decay(named: Iterable[tuple[str, torch.nn.Parameter]]) -> list[torch.nn.Parameter]:
    """Megatron's rule for the parameters without weight decay: biases (a name ending in ``.bias``)
    and every one-dimensional parameter (norm weights). A sharded parameter (FSDP2's DTensor) has
    its whole shape, so the rule sees the same dimensions on every rank."""
    return [p for n, p in named if n.endswith(".bias") or p.dim() == 1]
