"""ROLL's DeepSpeed strategies run on posttrain's FSDP2.

ROLL (up to v0.2; v0.3.0 removed its DeepSpeed strategy) trains ``actor_train`` and ``critic`` with
``strategy_name: deepspeed_train`` and runs ``reference`` with ``deepspeed_infer``; the
``strategy_config`` is a DeepSpeed config dict, which ROLL's examples interpolate from a preset
included with ``defaults`` (``strategy_config: ${deepspeed_zero3}``). Read from ROLL's
roll/distributed/strategy/deepspeed_strategy.py and DeepSpeed's configuration reference:

- ZeRO stage (``zero_optimization.stage``, DeepSpeed's default 0). ROLL's deepspeed_train asserts a
  stage > 0 and deepspeed_infer stage 3. Stage 3 shards parameters, gradients and optimizer state:
  FSDP2's full sharding, ``fsdp_config.reshard_after_forward: true``. Stage 2 shards gradients and
  optimizer state only: FSDP2 always shards parameters at rest, and the nearest it has is
  ``reshard_after_forward: false`` (parameters gathered once per forward, kept until the backward
  ends: no second gather, as ZeRO-2). Stage 1 (optimizer state only) becomes the same, which shards
  more than ZeRO-1 does: the same updates, less memory, more communication. A role on one device
  shards nothing under either, so stages 1 and 2 set nothing there.
- Offload: ``offload_optimizer.device: cpu`` is ``fsdp_config.optimizer_offload`` and
  ``offload_param.device: cpu`` (read by DeepSpeed at stage 3 only) ``param_offload``: FSDP2's one
  CPU offload policy, which keeps parameters, gradients and optimizer state in host memory and runs
  the optimizer step on the CPU, as DeepSpeed's offloaded optimizer does. NVMe is refused.
- Precision: ``bf16.enabled`` true computes in bf16 on a GPU, posttrain's
  ``mixed_precision.param_dtype: auto``; neither bf16 nor fp16 enabled (DeepSpeed's default) computes
  in the model's dtype, ``param_dtype: fp32`` (no autocast); fp16 is refused (no loss scaling).
- ROLL overwrites ``train_micro_batch_size_per_gpu``, ``train_batch_size`` and
  ``gradient_clipping`` from ``training_args`` and ``max_grad_norm`` before DeepSpeed reads them.
- Bucket sizes, overlap and prefetch options only schedule DeepSpeed's collectives and memory: the
  sums they compute, hence the updates, are the same (to float rounding).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects import roll_fsdp2, roll_megatron
from posttrain.config.dialects.source import leaves as dotted_leaves
from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.values import parse_device_list, roll_nodes, roll_per_node
from posttrain.config.tables import Rule

# ROLL role -> posttrain section, and the DeepSpeed strategy names ROLL runs each with.
ROLES = {"actor_train": ("actor", ("deepspeed_train",)), "critic": ("critic", ("deepspeed_train",)),
         "reference": ("ref", ("deepspeed_infer",))}
_MIN_STAGE = {"deepspeed_train": 1, "deepspeed_infer": 3}  # ROLL's asserts
_OVERWRITTEN = {
    "train_micro_batch_size_per_gpu": "training_args.per_device_train_batch_size",
    "train_batch_size": "training_args.per_device_train_batch_size x gradient_accumulation_steps x devices",
    "gradient_clipping": "max_grad_norm (posttrain's actor.grad_clip)",
}
_COMMS = "schedules DeepSpeed's collectives and buffers only (the reduced sums, hence the updates, are the same; FSDP2 gathers and reduce-scatters one layer at a time)"
_NO_EFFECT: dict[str, str] = {
    **{f"zero_optimization.{k}": _COMMS for k in (
        "allgather_partitions", "allgather_bucket_size", "overlap_comm", "reduce_scatter", "reduce_bucket_size",
        "contiguous_gradients", "sub_group_size", "round_robin_gradients", "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance")},
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "posttrain's checkpoints and final model always hold whole (gathered) weights",
    **{f"zero_optimization.{o}.pin_memory": "pinned host memory only speeds copies; posttrain pins offloaded memory on a GPU" for o in ("offload_optimizer", "offload_param")},
    "checkpoint.tag_validation": "DeepSpeed's check that ranks save under one tag; posttrain saves one checkpoint directory per step",
    "steps_per_print": "DeepSpeed's own progress log; posttrain logs every step (trainer.logger)",
    "wall_clock_breakdown": "DeepSpeed's own timing log; posttrain logs timing/* metrics every step",
}


def device_count(ctx: Context, role: str) -> int:
    """The devices a ROLL role runs on: its device_mapping, else every GPU of every node (0 where
    either is unreadable: the key itself reports that)."""
    mapping = ctx.get(f"{role}.device_mapping")
    if mapping is not None:
        try:
            return len(parse_device_list(mapping))
        except Exception:  # the device_mapping key itself reports the problem
            return 0
    return roll_nodes(ctx) * (roll_per_node(ctx) or 0)


def train_strategy(ctx: Context) -> None:
    """Each role's ``strategy_name``: DeepSpeed -> FSDP2 (`deepspeed`), ROLL's FSDP2 -> FSDP2
    (posttrain.config.dialects.roll_fsdp2), hf_infer for the reference (a plain torch forward, what
    posttrain runs) dropped, Megatron -> FSDP2 (posttrain.config.dialects.roll_megatron), others refused."""
    for role, (section, names) in ROLES.items():
        name_key = f"{role}.strategy_args.strategy_name"
        name = ctx.get(name_key)
        if name is None:
            continue
        ctx.consume(name_key)
        if isinstance(name, str) and name.startswith("deepspeed"):
            deepspeed(ctx, role, section, names, name)
        elif name == "hf_infer" and role == "reference":
            ctx.drop(name_key, "'hf_infer' is what posttrain does: a plain torch forward of the reference")
        elif isinstance(name, str) and name.startswith("fsdp2"):
            roll_fsdp2.fsdp2(ctx, role, section, name, device_count(ctx, role))
        elif isinstance(name, str) and name.startswith("megatron"):
            roll_megatron.megatron(ctx, role, name)
        else:
            why = f"{name!r} for {role}: posttrain runs {section} with torch (FSDP across devices: {section}.strategy), to which ROLL's DeepSpeed, FSDP2 and Megatron strategies translate"
            ctx.refuse(name_key, f"not supported: {why}", None, name)
    for role in ROLES:
        roll_megatron.moe_aux_loss_coef(ctx, role)


def deepspeed(ctx: Context, role: str, section: str, names: tuple[str, ...], name: str) -> None:
    """A role's DeepSpeed strategy -> its posttrain section's FSDP2 settings (module docstring)."""
    name_key, base = f"{role}.strategy_args.strategy_name", f"{role}.strategy_args.strategy_config"
    options = ctx.get(base) or {}
    ctx.consume(base)
    if name not in names:
        ctx.refuse(name_key, f"ROLL runs {role} with {' or '.join(names)}, not {name}", f"{section}.strategy", name)
        return
    if not isinstance(options, Mapping):
        ctx.refuse(base, f"expected a DeepSpeed config mapping, got {options!r}", None, options)
        return
    leaves = dotted_leaves(options)
    stage = leaves.pop("zero_optimization.stage", 0)
    if not isinstance(stage, int) or isinstance(stage, bool) or not _MIN_STAGE[name] <= stage <= 3:
        need = "3" if name == "deepspeed_infer" else "1, 2 or 3"
        why = f"ROLL's {name} runs ZeRO stage {need} only (it asserts so); got {stage!r} (DeepSpeed's default is 0)"
        ctx.refuse(f"{base}.zero_optimization.stage", why, f"{section}.fsdp_config.reshard_after_forward", stage)
        return
    ctx.set(f"{section}.strategy", "fsdp2", name_key, f"DeepSpeed ZeRO-{stage} runs as posttrain's FSDP2 (torch fully_shard, one unit per decoder layer)")
    _stage(ctx, role, section, f"{base}.zero_optimization.stage", stage)
    _precision(ctx, section, base, leaves)
    for sub, value in leaves.items():
        _option(ctx, role, section, base, sub, value, stage)


def _stage(ctx: Context, role: str, section: str, key: str, stage: int) -> None:
    native = f"{section}.fsdp_config.reshard_after_forward"
    if stage == 3:
        ctx.set(native, True, key, "ZeRO-3: parameters, gradients and optimizer state sharded, each layer gathered for its forward and again for its backward")
    elif device_count(ctx, role) <= 1:
        ctx.drop(key, f"ZeRO-{stage} on one device shards nothing, as posttrain's one process")
    else:
        what = "gradients and optimizer state" if stage == 2 else "optimizer state only (FSDP2 shards gradients and parameters at rest too: the same updates, less memory)"
        ctx.set(native, False, key, f"ZeRO-{stage} shards {what}; each layer is gathered once per forward and kept until its backward")


def _precision(ctx: Context, section: str, base: str, leaves: dict[str, Any]) -> None:
    bf16, fp16 = leaves.pop("bf16.enabled", None), leaves.pop("fp16.enabled", None)
    native = f"{section}.fsdp_config.mixed_precision.param_dtype"
    for key, value in (("bf16.enabled", bf16), ("fp16.enabled", fp16)):
        if value is not None and not isinstance(value, bool):
            ctx.refuse(f"{base}.{key}", f"expected true or false, got {value!r}", native, value)
            return
    if fp16:
        ctx.refuse(f"{base}.fp16.enabled", "fp16 needs loss scaling, which posttrain does not do; use bf16 (bf16.enabled: true)", native, True)
    elif bf16:
        ctx.drop(f"{base}.bf16.enabled", f"true: the role computes in bf16 on a GPU, as posttrain's {native} auto does")
    else:
        why = "" if bf16 is not None else "DeepSpeed's default (not written in the file): "
        ctx.set(native, "fp32", f"{base}.bf16.enabled", why + "neither bf16 nor fp16: DeepSpeed computes in the model's dtype (no autocast)")
    if fp16 is False:
        ctx.drop(f"{base}.fp16.enabled", "false: no fp16")
    for sub in [s for s in leaves if s.startswith(("fp16.", "bf16."))]:
        value = leaves.pop(sub)
        if sub.startswith("fp16."):  # loss scaling: read only with fp16, which posttrain refuses
            ctx.drop(f"{base}.{sub}", "read by DeepSpeed only with fp16.enabled" + (", refused here" if fp16 else ""))
        else:
            ctx.refuse(f"{base}.{sub}", f"a DeepSpeed {sub.split('.')[0]} option posttrain has no counterpart for (torch.autocast computes in bf16); remove it", None, value)


def _option(ctx: Context, role: str, section: str, base: str, sub: str, value: Any, stage: int) -> None:
    key = f"{base}.{sub}"
    if value is None or value == {}:
        ctx.drop(key, "null: not set")
    elif sub in _NO_EFFECT:
        ctx.drop(key, _NO_EFFECT[sub])
    elif sub in _OVERWRITTEN:
        ctx.drop(key, f"ROLL overwrites it with {_OVERWRITTEN[sub]} before DeepSpeed reads it")
    elif sub == "gradient_accumulation_steps":
        ours = ctx.get(f"{role}.training_args.gradient_accumulation_steps", 1)
        if value in ("auto", ours):
            ctx.drop(key, f"{value!r}: the optimizer step is training_args.gradient_accumulation_steps ({ours}), as ROLL sets it")
        else:
            ctx.refuse(key, f"DeepSpeed refuses it unless it equals training_args.gradient_accumulation_steps ({ours}), from which ROLL sets train_batch_size", None, value)
    elif sub in ("zero_optimization.offload_optimizer.device", "zero_optimization.offload_param.device"):
        _offload(ctx, section, key, sub, value, stage)
    else:
        ctx.refuse(key, "a DeepSpeed option posttrain has no counterpart for (it translates the ZeRO stage, CPU offload, bf16/fp16 and drops the collectives' tuning); remove it", None, value)


def _offload(ctx: Context, section: str, key: str, sub: str, value: Any, stage: int) -> None:
    param = sub.startswith("zero_optimization.offload_param")
    native = f"{section}.fsdp_config.{'param_offload' if param else 'optimizer_offload'}"
    if value in ("none", None):
        ctx.drop(key, f"{value!r}: no offload")
    elif value != "cpu":
        ctx.refuse(key, f"{value!r}: posttrain offloads to CPU memory only (FSDP2's CPU offload policy); use cpu or none", native, value)
    elif param and stage < 3:
        ctx.drop(key, f"DeepSpeed offloads parameters at ZeRO stage 3 only; at stage {stage} it leaves them on the device, as posttrain does")
    else:
        also = "parameters and gradients move with it: FSDP2 has one CPU offload policy, the optimizer step runs on the CPU as DeepSpeed's offloaded optimizer does"
        ctx.set(native, True, key, "cpu: " + also if not param else "cpu: parameters, gradients and optimizer state in host memory (FSDP2's CPU offload policy)")


def preset_library(ctx: Context, key: str) -> str | None:
    """A DeepSpeed preset of an included file (``deepspeed_zero2:`` of deepspeed_zero2.yaml) that no
    strategy_config interpolates: a template, as ROLL's guide includes all four and picks one."""
    top = key.split(".")[0]
    preset = ctx.get(top)
    used = any(top == k or k.startswith(top + ".") for k in ctx.interpolated)
    if "." in key and not used and top.startswith("deepspeed") and isinstance(preset, Mapping) and "zero_optimization" in preset:
        return f"DeepSpeed preset {top!r} of an included file that no strategy_config uses"
    return None


# ---- docs/config-mapping.md rows (posttrain.config.tables.Rule) ----------------------------------
def _rules() -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    for role, (section, names) in ROLES.items():
        base = f"{role}.strategy_args.strategy_config"
        name_ctx = (f"{role}.strategy_args.strategy_name", names[0])
        stage3 = (f"{base}.zero_optimization.stage", 3)
        rules[f"{role}.strategy_args.strategy_name"] = Rule(
            f"{section}.strategy", f"{' / '.join(names)}, {roll_fsdp2.NAMES[role]} or {roll_megatron.NAMES[role][1]}: posttrain's FSDP2 (fsdp2), the DeepSpeed, FSDP2 or Megatron options of strategy_config translated as their rows say; other strategies are refused", names[0], (stage3,))
        rules[f"{base}.zero_optimization.stage"] = Rule(
            f"{section}.fsdp_config.reshard_after_forward", "3: true (full sharding); 1 or 2 on several devices: false (parameters gathered once per forward, kept until the backward); 0 refused, as ROLL asserts; deepspeed_infer: 3 only", 2,
            (name_ctx, (f"{role}.device_mapping", "list(range(0,2))")) if names[0] == "deepspeed_train" else (name_ctx,))
        if names[0] == "deepspeed_infer":
            rules[f"{base}.zero_optimization.stage"] = Rule(rules[f"{base}.zero_optimization.stage"].native, rules[f"{base}.zero_optimization.stage"].how, 3, (name_ctx,))
        rules[f"{base}.zero_optimization.offload_optimizer.device"] = Rule(
            f"{section}.fsdp_config.optimizer_offload", "cpu: true (FSDP2's CPU offload policy: parameters, gradients and optimizer state in host memory); none: nothing; nvme refused", "cpu", (name_ctx, stage3))
        rules[f"{base}.zero_optimization.offload_param.device"] = Rule(
            f"{section}.fsdp_config.param_offload", "cpu at ZeRO stage 3: true (the same CPU offload policy); dropped below stage 3, where DeepSpeed ignores it; nvme refused", "cpu", (name_ctx, stage3))
        rules[f"{base}.bf16.enabled"] = Rule(
            f"{section}.fsdp_config.mixed_precision.param_dtype", "true: nothing (auto computes in bf16 on a GPU); false or absent with fp16 off: fp32 (no autocast); fp16.enabled true is refused (no loss scaling)", False, (name_ctx, stage3))
        for sub, why in {**_NO_EFFECT, **{k: f"ROLL overwrites it with {v}" for k, v in _OVERWRITTEN.items()}}.items():
            rules[f"{base}.{sub}"] = Rule(None, why, "auto", (name_ctx, stage3))
    return rules


RULES = {**_rules(), **roll_fsdp2.rules(), **roll_megatron.rules()}
HANDLERS = [train_strategy]
