"""Optimizer and learning-rate schedule, shared by the `actor` and `critic` sections.

One class serves both roles, so its refs are relative (``"verl:.lr"``); the holding field names the
prefix (``actor.optim`` holds ``verl:actor_rollout_ref.actor.optim``, ``critic.optim`` holds
``verl:critic.optim``). The code that honours these fields is `posttrain.optim`.

The schedule is a multiplier of ``lr`` per optimizer step: linear warm-up over ``lr_warmup_steps``
(or ``lr_warmup_steps_ratio`` x total steps when that is -1), then ``lr_scheduler_type``. The total is
``trainer.total_training_steps`` (derived from the epochs when null); verl injects the same number
into ``optim.total_training_steps`` at run time, which is why that key has no field here.

Gradient clipping is a field of the role (``actor.grad_clip``, ``critic.grad_clip``), not of optim.
"""

from __future__ import annotations

from posttrain.config.fields import param, section

SCHEDULERS = ("constant", "cosine", "wsd")  # must match posttrain.optim.schedules.SCHEDULES


@section
class OptimConfig:
    """AdamW and its learning-rate schedule."""

    optimizer: str = param("adamw", doc="Optimizer; adamw (Adam with decoupled weight decay) is the one built in.", todo="other optimizers (later issue)", refs=["verl:.optimizer"])
    lr: float = param(1e-6, doc="Peak learning rate.", gt=0, refs=["verl:.lr", "roll:.learning_rate", "trinity:.lr"])
    betas: list[float] = param(factory=lambda: [0.9, 0.999], doc="AdamW (beta1, beta2): decay rates of the gradient mean and square averages.", ge=0, lt=1, refs=["verl:.betas", "trinity:.betas"])
    eps: float = param(1e-8, doc="AdamW epsilon added to the denominator.", gt=0)
    fused: bool = param(False, doc="torch's fused AdamW kernel (one pass per tensor): the same update up to float rounding, 8-9 ms instead of 30-34 ms for clip + step at 4.2M parameters on 2 CPU threads. Off by default so that runs keep their exact trajectories (float rounding moves a chaotic run: the quickstart's SFT warm-up ends at another accuracy).")
    weight_decay: float = param(0.01, doc="Decoupled weight decay per step (AdamW), as a fraction of lr x weight.", ge=0, refs=["verl:.weight_decay", "roll:.weight_decay", "trinity:.weight_decay"])
    lr_warmup_steps: int = param(-1, doc="Linear warm-up in optimizer steps; -1 derives it from lr_warmup_steps_ratio.", ge=-1, refs=["verl:.lr_warmup_steps", "roll:.warmup_steps", "trinity:.lr_warmup_steps"])
    lr_warmup_steps_ratio: float = param(0.0, doc="Warm-up as a fraction of total training steps (used when lr_warmup_steps is -1).", ge=0, le=1, refs=["verl:.lr_warmup_steps_ratio", "trinity:.lr_warmup_steps_ratio", "roll:.warmup_ratio"])
    lr_scheduler_type: str = param("constant", doc="LR after warm-up: constant, cosine (down to min_lr_ratio x lr at the end) or wsd (stable, then linear decay over the last 10% of steps).", choices=SCHEDULERS, refs=["verl:.lr_scheduler_type", "verl:.warmup_style", "verl:.lr_decay_style", "roll:.lr_scheduler_type", "trinity:.warmup_style", "trinity:.lr_scheduler_type"])
    min_lr_ratio: float = param(0.0, doc="Final LR of cosine and wsd as a fraction of lr.", ge=0, le=1, refs=["verl:.min_lr_ratio", "trinity:.min_lr_ratio"])
    num_cycles: float = param(0.5, doc="Cosine periods over the decay (0.5: one half-wave from lr down to the minimum).", gt=0, refs=["verl:.num_cycles"])
    lr_warmup_init: float = param(0.0, doc="LR the warm-up starts from, as an absolute value: warm-up step k (0-based) uses init + (lr - init) * (k + 1) / warm-up steps.", ge=0, refs=["verl:.lr_warmup_init"])
    lr_decay_steps: int | None = param(None, doc="Steps over which the LR decays after warm-up; null decays until the last step.", ge=1, todo="a decay shorter than the run (later issue)", refs=["verl:.lr_decay_steps"])


@section
class CriticOptimConfig(OptimConfig):
    """AdamW and its learning-rate schedule (critic: a larger default LR, as in verl)."""

    lr: float = param(1e-5, doc="Peak learning rate.", gt=0, refs=["verl:.lr", "roll:.learning_rate", "trinity:.lr"])


def _unsupported(verl_prefix: str) -> dict[str, str]:
    """Megatron-scheduler keys under one role's verl ``optim`` with no field here."""
    return {
        f"{verl_prefix}.total_training_steps": "a placeholder verl fills in at run time (its default -1 is accepted); posttrain's schedule length is trainer.total_training_steps",
        f"{verl_prefix}.min_lr": "give the final LR as a fraction of lr in optim.min_lr_ratio (= min_lr / lr)",
        f"{verl_prefix}.weight_decay_incr_style": "Megatron scheduler only: posttrain's weight decay is constant",
        f"{verl_prefix}.lr_wsd_decay_style": "Megatron scheduler only: posttrain's wsd decays linearly",
        f"{verl_prefix}.lr_wsd_decay_steps": "Megatron scheduler only: posttrain's wsd decays over the last 10% of steps",
        f"{verl_prefix}.use_checkpoint_opt_param_scheduler": "Megatron only: posttrain restores the scheduler with the optimizer from its checkpoint",
    }


# Reference keys with no field in `actor.optim`/`critic.optim`, and why.
UNSUPPORTED: dict[str, str] = {
    **_unsupported("verl:actor_rollout_ref.actor.optim"),
    **_unsupported("verl:critic.optim"),
}

# ROLL's RLVR and agentic pipelines never read their roles' Hugging Face epoch count: their length is
# max_steps (a DPO file's num_train_epochs is its passes over the pairs: the ROLL dialect's DPO handler).
_ROLL_EPOCHS = "ROLL's RL pipelines do not read it (their length is max_steps; posttrain's trainer.total_training_steps)"
NO_EFFECT: dict[str, str] = {
    "roll:actor_train.training_args.num_train_epochs": _ROLL_EPOCHS,
    "roll:critic.training_args.num_train_epochs": _ROLL_EPOCHS,
}
