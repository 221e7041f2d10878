"""Optimizer and learning-rate schedule, shared by the actor and the critic sections."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class OptimConfig:
    """AdamW and its learning-rate schedule."""

    lr: float = param(1e-6, doc="Peak learning rate.", gt=0, refs=["verl:actor_rollout_ref.actor.optim.lr"])
    lr_warmup_steps: int = param(-1, doc="Linear warm-up steps; -1 derives them from lr_warmup_steps_ratio.", ge=-1, refs=["verl:actor_rollout_ref.actor.optim.lr_warmup_steps"])
    lr_warmup_steps_ratio: float = param(0.0, doc="Warm-up as a fraction of total training steps (used when lr_warmup_steps is -1).", ge=0, le=1, refs=["verl:actor_rollout_ref.actor.optim.lr_warmup_steps_ratio"])
