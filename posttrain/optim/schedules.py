"""The learning-rate schedules verl/ROLL/Trinity expose.

A schedule is a pure function ``lr_multiplier(style, step, ...) -> float`` of the optimizer step, so it
can be tested with numbers and restored exactly on resume (the step count is the whole state).

- ``constant``: linear warm-up from 0 (or ``warmup_init_ratio`` x peak: verl's ``lr_warmup_init``)
  to the peak over ``warmup_steps``, then the peak.
- ``cosine``: linear warm-up, then a cosine from the peak down to ``min_lr_ratio`` x peak at
  ``total_steps`` (``num_cycles`` = 0.5 is a half cosine, as in Loshchilov & Hutter, SGDR, 2017).
- ``linear``: linear warm-up, then a straight line from the peak down to ``min_lr_ratio`` x peak at
  ``total_steps`` (Hugging Face's ``linear`` schedule with min_lr_ratio 0: ROLL's default).
- ``wsd``: warm-up, stable, decay (Hu et al., MiniCPM, 2024): the peak until the last
  ``decay_ratio`` x total steps, then a linear decay to ``min_lr_ratio`` x peak.

``decay_steps`` (``optim.lr_decay_steps``) ends the decay of cosine and wsd at that step instead of
at ``total_steps``; the LR then holds the value the decay ended at (``min_lr_ratio`` x peak, for cosine
with ``num_cycles`` 0.5). The step is counted from the start,
warm-up included, as Megatron's OptimizerParamScheduler (the scheduler verl's and ROLL's
``lr_decay_steps`` configure) counts it: decay progress = (step - warm-up) / (decay_steps - warm-up).
"""

from __future__ import annotations

import math

import torch

SCHEDULES = ("constant", "cosine", "linear", "wsd")


def lr_multiplier(
    style: str,
    step: int,
    *,
    warmup_steps: int,
    total_steps: int,
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
    decay_ratio: float = 0.1,
    warmup_init_ratio: float = 0.0,
    decay_steps: int | None = None,
) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based). During warm-up it
    rises linearly from ``warmup_init_ratio``: ``r0 + (1 - r0) * step / warmup_steps``, so the first
    update trains at the initial LR (0 by default) and step ``warmup_steps`` at the peak, as verl's
    LambdaLR schedules, Hugging Face's and Megatron's OptimizerParamScheduler count. The decay ends
    at ``decay_steps`` when given, else at ``total_steps``, and holds its last value."""
    if style not in SCHEDULES:
        raise ValueError(f"unknown lr schedule {style!r}; choose one of {', '.join(SCHEDULES)}")
    if warmup_steps > 0 and step < warmup_steps:
        return warmup_init_ratio + (1.0 - warmup_init_ratio) * step / warmup_steps
    if style == "constant":
        return 1.0
    # the decay's horizon: past it, progress is clamped at 1 and the LR holds its final value
    total_steps = max(decay_steps if decay_steps is not None else total_steps, 1)
    if style == "cosine":
        span = max(total_steps - warmup_steps, 1)
        progress = min((step - warmup_steps) / span, 1.0)
        cosine = 0.5 * (1.0 + math.cos(math.pi * 2.0 * num_cycles * progress))
        return min_lr_ratio + (1.0 - min_lr_ratio) * cosine
    if style == "linear":  # HF: (total - step) / (total - warm-up) after warm-up, here floored at min_lr_ratio
        progress = min((step - warmup_steps) / max(total_steps - warmup_steps, 1), 1.0)
        return 1.0 - (1.0 - min_lr_ratio) * progress
    decay_steps = max(int(round(total_steps * decay_ratio)), 1)
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return 1.0
    progress = min((step - decay_start) / decay_steps, 1.0)
    return 1.0 - (1.0 - min_lr_ratio) * progress


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    style: str,
    *,
    warmup_steps: int,
    total_steps: int,
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
    decay_ratio: float = 0.1,
    warmup_init_ratio: float = 0.0,
    decay_steps: int | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR driven by `lr_multiplier`; its state is just the step count."""

    def fn(step: int) -> float:
        return lr_multiplier(
            style,
            step,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
            min_lr_ratio=min_lr_ratio,
            num_cycles=num_cycles,
            decay_ratio=decay_ratio,
            warmup_init_ratio=warmup_init_ratio,
            decay_steps=decay_steps,
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
