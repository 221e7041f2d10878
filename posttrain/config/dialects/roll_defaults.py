"""ROLL's loss, KL-controller and sampling semantics, where posttrain's defaults or meanings differ.

Each rule reads ROLL's own definition (its pipeline config dataclasses and its actor workers), not
posttrain's default for the field the key lands on:

- ``dual_clip_loss`` (ROLL's default false): ROLL bounds the loss of a negative-advantage token at
  ``(1 + 2 x pg_clip) x |A|``, a bound derived from its clip, not a separate constant; so
  ``actor.clip_ratio_c`` becomes ``1 + 2 x pg_clip`` (pg_clip's default 0.2 gives 1.4) and a file
  without the key runs without dual clip, as ROLL does.
- ``value_clip`` (default null): null means the critic's value loss is not clipped at all.
- ``target_kl`` (default null): null keeps ROLL's fixed KL-in-reward coefficient; a number selects
  its adaptive controller (Ziegler et al.), so ``algorithm.kl_ctrl.type`` becomes ``adaptive``.
- ``training_args`` of ``actor_train`` and ``critic`` (and an SFT file's ``sft_train``): ROLL's ``lr_scheduler_type`` default is
  ``linear`` (Hugging Face's: down to 0 at the last step) and its ``weight_decay`` default 0, where
  posttrain's are constant and 0.01; a file that leaves them out gets ROLL's.
- The LR schedule's clock: every ROLL strategy steps its scheduler after each optimizer update, over
  ``max_steps x rollout_batch_size x num_return_sequences x ppo_epochs / backward batch`` updates
  (the critic's count without ppo_epochs: its worker makes one pass), and a ``warmup_ratio`` becomes
  ``ceil(ratio x updates)`` (Hugging Face's TrainingArguments.get_warmup_steps): posttrain's
  ``optim.lr_schedule_unit: update`` and ``lr_warmup_rounding: ceil`` for both trained roles.
- Generation: ROLL's ``generating_args`` of ``actor_infer`` and of ``validation`` sample
  (``do_sample`` true) with ROLL's defaults temperature 0.95, top_p 0.7, top_k 50 for what a file
  leaves out; validation is not greedy unless the file says ``do_sample: false``.

A default ROLL would apply is written only into a pipeline config (one with ``actor_train``,
``actor_infer``, ``pretrain`` or ``rollout_batch_size``), never into a fragment such as an
environment library; the report names it "ROLL's default (not written in the file)".
"""

from __future__ import annotations

from numbers import Real
from typing import Any

from posttrain.config.dialects import roll_step_envs
from posttrain.config.dialects.translate import Context

ROLL_DEFAULT = "ROLL's default (not written in the file)"
# ROLL's GeneratingArguments defaults for the sampling keys posttrain has.
GENERATING_DEFAULTS: dict[str, Any] = {"temperature": 0.95, "top_p": 0.7, "top_k": 50}
PG_CLIP_DEFAULT = 0.2
_PIPELINE_KEYS = ("actor_train", "actor_infer", "pretrain", "rollout_batch_size")


def is_pipeline(ctx: Context) -> bool:
    """Whether the file is a whole ROLL pipeline config (ROLL's defaults apply to what it omits)."""
    return any(ctx.has(k) for k in _PIPELINE_KEYS)


def _number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def dual_clip(ctx: Context) -> None:
    key = "dual_clip_loss"
    if not ctx.has(key):
        if is_pipeline(ctx):
            ctx.set("actor.dual_clip", False, key, ROLL_DEFAULT + ": false")
        return
    ctx.consume(key)
    on = ctx.get(key)
    if not isinstance(on, bool):
        ctx.refuse(key, f"expected true or false, got {on!r}", "actor.dual_clip", on)
        return
    ctx.set("actor.dual_clip", on, key)
    if not on:
        return
    clip = ctx.get("pg_clip", PG_CLIP_DEFAULT)
    if not _number(clip) or clip <= 0:
        ctx.refuse(key, f"ROLL's dual-clip bound is 1 + 2 x pg_clip, and pg_clip is {clip!r}: set pg_clip to a number > 0", "actor.clip_ratio_c", on)
        return
    # ROLL's workers: loss = min(loss, -(1 + 2 pg_clip) A) where A < 0.
    ctx.set("actor.clip_ratio_c", 1 + 2 * clip, key, f"ROLL's dual-clip bound 1 + 2 x pg_clip ({clip})")


def value_clip(ctx: Context) -> None:
    key = "value_clip"
    if ctx.has(key) and ctx.get(key) is not None:
        return  # a number: the one-to-one ref to critic.cliprange_value
    if ctx.has(key):
        ctx.consume(key)
        ctx.set("critic.cliprange_value", None, key, "null: ROLL clips values only when value_clip is set")
    elif is_pipeline(ctx):
        ctx.set("critic.cliprange_value", None, key, ROLL_DEFAULT + ": null, no value clipping")


def target_kl(ctx: Context) -> None:
    key = "target_kl"
    if not ctx.has(key):
        return
    ctx.consume(key)
    value = ctx.get(key)
    if value is None:
        ctx.drop(key, "null: ROLL's fixed KL controller keeps init_kl_coef, as posttrain's algorithm.kl_ctrl.type fixed does")
        return
    ctx.set("algorithm.kl_ctrl.type", "adaptive", key, "a target_kl selects ROLL's adaptive KL controller")
    ctx.set("algorithm.kl_ctrl.target_kl", value, key)


def sampling(ctx: Context) -> None:
    """ROLL's GeneratingArguments defaults for training and validation generation (module docstring)."""
    if not is_pipeline(ctx):
        return
    for role, native in (("actor_infer", "rollout"), ("validation", "rollout.val_kwargs")):
        if role == "validation" and not ctx.has(role):
            continue  # no validation worker: ROLL does not validate
        args = ctx.get(f"{role}.generating_args") or {}
        for name, value in GENERATING_DEFAULTS.items():
            if name not in args and f"{native}.{name}" not in ctx.origin:  # a training env manager's own settings win
                ctx.set(f"{native}.{name}", value, f"{role}.generating_args.{name}", ROLL_DEFAULT)
        if role == "validation":
            key = f"{role}.generating_args.do_sample"
            ctx.consume(key)
            given = args.get("do_sample", True)
            if not isinstance(given, bool):
                ctx.refuse(key, f"expected true or false, got {given!r}", "rollout.val_kwargs.do_sample", given)
                continue
            why = "" if "do_sample" in args else ROLL_DEFAULT + ": ROLL's validation samples with its generating_args"
            ctx.set("rollout.val_kwargs.do_sample", given, key, why)
            trained = (ctx.get("actor_infer.generating_args") or {}).get("repetition_penalty", 1.0)
            if "repetition_penalty" not in args and trained != 1.0:  # its own default, not the rollout's penalty
                ctx.set("rollout.val_kwargs.repetition_penalty", 1.0, f"{role}.generating_args.repetition_penalty", ROLL_DEFAULT)


# ROLL's TrainingArguments defaults that differ from posttrain's optimizer defaults (roll/configs/
# training_args.py): Hugging Face's linear decay to 0 over the role's optimizer steps, no weight decay.
TRAINING_DEFAULTS: dict[str, Any] = {"lr_scheduler_type": "linear", "weight_decay": 0.0}


def training_args(ctx: Context) -> None:
    """ROLL's training_args defaults for the trained roles of a pipeline file (an SFT file's sft_train
    is read as actor_train): what the file leaves out takes ROLL's value, not posttrain's."""
    if not is_pipeline(ctx):
        return
    for role, section in (("actor_train", "actor"), ("critic", "critic")):
        if role == "critic" and not ctx.has(role):
            continue  # no critic worker: nothing trains a value model
        for name, value in TRAINING_DEFAULTS.items():  # the same names under posttrain's optim
            if not ctx.has(f"{role}.training_args.{name}"):
                ctx.set(f"{section}.optim.{name}", value, f"{role}.training_args.{name}", f"{ROLL_DEFAULT}: {value!r}")
        if ctx.origin.get("algorithm.kind", (None, "rl"))[1] == "rl" and roll_step_envs.stepped_tags(ctx):
            roll_step_envs.lr_schedule_unit(ctx, role, section)  # a step's updates vary with its step samples
        elif ctx.origin.get("algorithm.kind", (None, "rl"))[1] == "rl":  # an SFT or DPO step is one update already
            ctx.set(f"{section}.optim.lr_schedule_unit", "update", f"{role}.training_args",
                    "ROLL steps the LR schedule after every optimizer update, so warmup_steps and the schedule's length count updates")
        ctx.set(f"{section}.optim.lr_warmup_rounding", "ceil", f"{role}.training_args", "ROLL rounds warmup_ratio x updates up")


HANDLERS = [dual_clip, value_clip, target_kl, sampling, training_args]
