"""Optimizer and learning-rate schedule, shared by the `actor` and `critic` sections.

One class serves both roles, so its refs are relative (``"verl:.lr"``); the holding field names the
prefix (``actor.optim`` holds ``verl:actor_rollout_ref.actor.optim``, ``critic.optim`` holds
``verl:critic.optim``). The code that honours these fields is `posttrain.optim`.

The schedule is a multiplier of ``lr``: linear warm-up over ``lr_warmup_steps`` (or
``lr_warmup_steps_ratio`` x total steps when that is -1), then ``lr_scheduler_type``. It advances once
per training step (``lr_schedule_unit: step``, verl) or once per optimizer update (``update``, ROLL).
The total is ``trainer.total_training_steps`` (derived from the epochs when null), times the role's
updates per step with ``update``; verl injects the training steps into ``optim.total_training_steps``
at run time, which is why that key has no field here.

Gradient clipping is a field of the role (``actor.grad_clip``, ``critic.grad_clip``), not of optim.
"""

from __future__ import annotations

import inspect
from typing import Any

from posttrain.config.fields import param, section

SCHEDULERS = ("constant", "cosine", "linear", "wsd")  # must match posttrain.optim.schedules.SCHEDULES
OPTIMIZERS = ("adamw", "adam", "sgd")  # must match posttrain.optim.optimizers.OPTIMIZERS
# The constructor arguments that have a field of their own (override_optimizer_config may not set them).
OWN_FIELDS = ("params", "lr", "betas", "eps", "weight_decay", "fused")


@section
class OptimConfig:
    """The optimizer (AdamW by default) and its learning-rate schedule."""

    optimizer: str = param("adamw", doc="Optimizer, torch.optim's class of that name: adamw (Adam with decoupled weight decay), adam (weight_decay is an L2 term added to the gradient) or sgd (momentum and nesterov through override_optimizer_config). verl's class names AdamW, Adam and SGD are read as these.", choices=OPTIMIZERS, refs=["verl:.optimizer"])
    override_optimizer_config: dict[str, Any] | None = param(None, doc="More keyword arguments of the optimizer's torch.optim constructor, e.g. {momentum: 0.9, nesterov: true} for sgd or {amsgrad: true} for adam/adamw; checked against the constructor at load time. lr, betas, eps, weight_decay and fused have fields of their own.", refs=["verl:.override_optimizer_config"])
    lr: float = param(1e-6, doc="Peak learning rate.", gt=0, refs=["verl:.lr", "roll:.learning_rate", "trinity:.lr"])
    betas: list[float] = param(factory=lambda: [0.9, 0.999], doc="adamw/adam (beta1, beta2): decay rates of the gradient mean and square averages.", ge=0, lt=1, refs=["verl:.betas", "trinity:.betas"])
    eps: float = param(1e-8, doc="adamw/adam epsilon added to the denominator.", gt=0)
    fused: bool = param(False, doc="torch's fused optimizer kernel (one pass per tensor; adamw, adam and sgd have one): the same update up to float rounding; for adamw, 8-9 ms instead of 30-34 ms for clip + step at 4.2M parameters on 2 CPU threads. Off by default so that runs keep their exact trajectories (float rounding moves a chaotic run: the quickstart's SFT warm-up ends at another accuracy).")
    weight_decay: float = param(0.01, doc="Weight decay: adamw decouples it (each step subtracts lr x weight_decay x weight), adam and sgd add weight_decay x weight to the gradient (L2).", ge=0, refs=["verl:.weight_decay", "roll:.weight_decay", "trinity:.weight_decay"])
    lr_warmup_steps: int = param(-1, doc="Linear warm-up in optimizer steps; -1 derives it from lr_warmup_steps_ratio.", ge=-1, refs=["verl:.lr_warmup_steps", "roll:.warmup_steps", "trinity:.lr_warmup_steps"])
    lr_warmup_steps_ratio: float = param(0.0, doc="Warm-up as a fraction of total training steps (used when lr_warmup_steps is -1).", ge=0, le=1, refs=["verl:.lr_warmup_steps_ratio", "trinity:.lr_warmup_steps_ratio", "roll:.warmup_ratio"])
    lr_scheduler_type: str = param("constant", doc="LR after warm-up: constant, cosine (down to min_lr_ratio x lr at the end), linear (a straight line down to min_lr_ratio x lr at the end: Hugging Face's and ROLL's default) or wsd (stable, then linear decay over the last 10% of steps).", choices=SCHEDULERS, refs=["verl:.lr_scheduler_type", "verl:.warmup_style", "verl:.lr_decay_style", "roll:.lr_scheduler_type", "trinity:.warmup_style", "trinity:.lr_scheduler_type"])
    min_lr_ratio: float = param(0.0, doc="Final LR of cosine and wsd as a fraction of lr.", ge=0, le=1, refs=["verl:.min_lr_ratio", "trinity:.min_lr_ratio"])
    num_cycles: float = param(0.5, doc="Cosine periods over the decay (0.5: one half-wave from lr down to the minimum).", gt=0, refs=["verl:.num_cycles"])
    lr_warmup_init: float = param(0.0, doc="LR the warm-up starts from, as an absolute value: warm-up step k (0-based) uses init + (lr - init) * k / warm-up steps (the first update at init, as verl, Hugging Face and Megatron schedule it).", ge=0, refs=["verl:.lr_warmup_init"])
    decay_bias_and_norm: bool = param(True, doc="Apply weight_decay to every parameter that trains; false exempts biases and all one-dimensional parameters (norm weights), as Megatron's optimizer does (a parameter whose name ends in .bias or that has one dimension gets no weight decay): verl's Megatron trainer sets it false.")
    lr_schedule_unit: str = param("step", doc="What one step of the LR schedule is, in an RL stage: step (one per training step, as verl counts: warm-up, lr_decay_steps and the schedule's length count training steps) or update (one per optimizer update, as ROLL and Hugging Face count: the schedule is trainer.total_training_steps x this role's updates per step long, ppo_epochs x data.train_batch_size / ppo_mini_batch_size, and lr_warmup_steps and lr_decay_steps count updates, so the LR also moves between the updates of one step). An SFT or DPO step is one update, so both units give the same schedule there.", choices=("step", "update"))
    lr_schedule_updates: int | None = param(None, doc="With lr_schedule_unit update: the schedule's length in optimizer updates, fixed in advance (ROLL sizes it from max_steps x rollout_batch_size before its step env managers' step samples are counted); null: trainer.total_training_steps x the role's updates per step. lr_warmup_steps_ratio is a fraction of it; updates past it hold the decay's final value (min_lr_ratio x lr), as Megatron's scheduler and Hugging Face's linear schedule do. Needed for update with env.train_rows turn, whose updates per step vary.", ge=1)
    lr_warmup_rounding: str = param("floor", doc="How lr_warmup_steps_ratio x the schedule's length becomes whole steps: floor (verl's int()) or ceil (Hugging Face's and ROLL's math.ceil).", choices=("floor", "ceil"))
    lr_decay_steps: int | None = param(None, doc="Training step at which the decay of cosine or wsd ends, counted from the start (warm-up included, as Megatron's scheduler that verl and ROLL use): the LR decays from the end of warm-up to its final value at this step (min_lr_ratio x lr; for cosine with the default num_cycles) and stays there; null ends the decay at the last step. Must exceed the warm-up; constant has no decay.", ge=1, refs=["verl:.lr_decay_steps"])


@section
class CriticOptimConfig(OptimConfig):
    """AdamW and its learning-rate schedule (critic: a larger default LR, as in verl)."""

    lr: float = param(1e-5, doc="Peak learning rate.", gt=0, refs=["verl:.lr", "roll:.learning_rate", "trinity:.lr"])


def optimizer_arguments(name: str) -> tuple[str, ...]:
    """The keyword arguments of torch.optim's constructor for optimizer `name` that
    override_optimizer_config may set (those without a field of their own)."""
    import torch  # the constructor's signature is the list of what it takes

    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}[name]
    return tuple(k for k in inspect.signature(cls).parameters if k not in OWN_FIELDS)


def check_optimizer_args(cfg: Any) -> list[str]:
    """override_optimizer_config names only arguments the chosen optimizer takes; adam's betas/eps
    are refused with sgd, which has neither."""
    problems = []
    for role in ("actor", "critic"):
        o = getattr(getattr(cfg, role, None), "optim", None)
        if o is None:
            continue
        allowed = optimizer_arguments(o.optimizer)
        for key in o.override_optimizer_config or {}:
            if key in OWN_FIELDS:
                problems.append(f"{role}.optim.override_optimizer_config sets {key}, which has a field of its own: set {role}.optim.{key} instead")
            elif key not in allowed:
                problems.append(f"{role}.optim.override_optimizer_config: {key!r} is not an argument of torch.optim's {o.optimizer} (it takes {', '.join(allowed)})")
        if o.optimizer == "sgd":
            for name, default in (("betas", [0.9, 0.999]), ("eps", 1e-8)):
                if getattr(o, name) != default:
                    problems.append(f"{role}.optim.{name} is {getattr(o, name)} but sgd has no {name} (Adam's moment estimates); leave it at its default or choose adam/adamw")
    return problems


def _unsupported(verl_prefix: str) -> dict[str, str]:
    """Megatron-scheduler keys under one role's verl ``optim`` with no field here."""
    return {
        f"{verl_prefix}.total_training_steps": "a placeholder verl fills in at run time (its default -1 is accepted); posttrain's schedule length is trainer.total_training_steps",
        f"{verl_prefix}.weight_decay_incr_style": "Megatron scheduler only: posttrain's weight decay is constant",
        f"{verl_prefix}.lr_wsd_decay_style": "Megatron scheduler only: posttrain's wsd decays linearly",
        f"{verl_prefix}.lr_wsd_decay_steps": "Megatron scheduler only: posttrain's wsd decays over the last 10% of steps",
        f"{verl_prefix}.use_checkpoint_opt_param_scheduler": "Megatron only: posttrain restores the scheduler with the optimizer from its checkpoint",
        f"{verl_prefix}.optimizer_impl": "posttrain builds its optimizers from torch.optim (optim.optimizer: adamw, adam or sgd, with optim.override_optimizer_config for further arguments); its default torch.optim is accepted, other libraries' optimizers (torchao, bitsandbytes) are not built in",
    }


_PRECISION_AWARE = ("Megatron's precision-aware optimizer: gradients and Adam's moments kept in lower precision, other numbers than "
                    "posttrain's fp32 optimizer state: verl's default (false, fp32) is accepted")
_MUON = "an option of Megatron's Muon optimizer, read only with optim.optimizer muon (which posttrain refuses: it provides AdamW, Adam and SGD)"
_MEGATRON_OPTIM = ("use_precision_aware_optimizer", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
_MUON_KEYS = ("muon_momentum", "muon_nesterov", "muon_split_qkv", "muon_scale_mode", "muon_coefficient_type", "muon_num_ns_steps",
              "muon_tp_mode", "muon_fp32_matmul_prec", "muon_extra_scale_factor", "muon_scalar_optimizer", "muon_match_adamw_update_rms")

# Reference keys with no field in `actor.optim`/`critic.optim`, and why.
UNSUPPORTED: dict[str, str] = {
    **_unsupported("verl:actor_rollout_ref.actor.optim"),
    **_unsupported("verl:critic.optim"),
    **{f"verl:{role}.optim.{k}": _PRECISION_AWARE for role in ("actor_rollout_ref.actor", "critic") for k in _MEGATRON_OPTIM},
}

# ROLL's RLVR and agentic pipelines never read their roles' Hugging Face epoch count: their length is
# max_steps (a DPO file's num_train_epochs is its passes over the pairs: the ROLL dialect's DPO handler).
_ROLL_EPOCHS = "ROLL's RL pipelines do not read it (their length is max_steps; posttrain's trainer.total_training_steps)"
NO_EFFECT: dict[str, str] = {
    **{f"verl:{role}.optim.{k}": _MUON for role in ("actor_rollout_ref.actor", "critic") for k in _MUON_KEYS},
    **{f"verl:{role}.optim.use_layer_wise_distributed_optimizer": ("how Megatron's distributed optimizer splits its state over ranks "
                                                                   "(by layer): where the state lives, not the update")
       for role in ("actor_rollout_ref.actor", "critic")},
    "roll:actor_train.training_args.num_train_epochs": _ROLL_EPOCHS,
    "roll:critic.training_args.num_train_epochs": _ROLL_EPOCHS,
}
