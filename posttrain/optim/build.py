"""The optimizer and learning-rate schedule of one training role, built from its `optim` section.

One builder for every role that trains: the RL actor (`actor.optim`) and critic (`critic.optim`),
and the policy of an SFT or DPO stage (`actor.optim`). The warm-up length is the one
`posttrain.config.derive` worked out (`lr_warmup_steps`, or the ratio of the total), and the total is
the stage's training steps, so every role's schedule is counted in the same steps.
"""

from __future__ import annotations

from typing import Iterable

import torch

from posttrain.config.sections.optim import OptimConfig
from posttrain.optim.optimizers import build_optimizer, exempt_from_decay
from posttrain.optim.schedules import build_scheduler


def build_optimization(
    params: Iterable[torch.nn.Parameter | tuple[str, torch.nn.Parameter]], o: OptimConfig, *, warmup_steps: int, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """The optimizer `o.optimizer` over `params` (parameters, or a module's ``named_parameters()``:
    `o.decay_bias_and_norm` reads the names) and its LR schedule, as `o` configures them."""
    named = [item if isinstance(item, tuple) else ("", item) for item in params]
    optimizer = build_optimizer(
        [p for _, p in named], name=o.optimizer, lr=o.lr, weight_decay=o.weight_decay, betas=tuple(o.betas), eps=o.eps, fused=o.fused,
        extra=o.override_optimizer_config, no_decay=() if o.decay_bias_and_norm else exempt_from_decay(named),
    )
    scheduler = build_scheduler(
        optimizer, o.lr_scheduler_type, warmup_steps=warmup_steps, total_steps=total_steps,
        min_lr_ratio=o.min_lr_ratio, num_cycles=o.num_cycles, decay_steps=o.lr_decay_steps,
        # lr_warmup_init is an absolute LR; the schedule works in multiples of the peak
        warmup_init_ratio=o.lr_warmup_init / o.lr if o.lr > 0 else 0.0,
    )
    return optimizer, scheduler
