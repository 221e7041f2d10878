"""ROLL's FSDP2 strategies run on posttrain's FSDP2.

ROLL trains ``actor_train`` and ``critic`` with ``strategy_name: fsdp2_train`` and runs ``reference``
with ``fsdp2_infer``; both build torch's ``fully_shard`` from a flat ``strategy_config``. Read from
ROLL's roll/distributed/strategy/fsdp2_strategy.py and roll/utils/fsdp_utils.py (8eb27cc):

- ``fsdp_size`` (ROLL's default 1): at most 1, or at least the role's device count, shards over every
  device (a 1-D mesh), posttrain's ``fsdp_config.fsdp_size: -1``; in between, a (replicate, shard)
  mesh of ``devices // fsdp_size`` replicas (HSDP), posttrain's ``fsdp_size`` of the same number,
  which must divide the device count (torch's mesh needs it).
- ``param_dtype`` (default bf16) is the compute dtype of torch's MixedPrecisionPolicy: bf16 is
  posttrain's ``mixed_precision.param_dtype: auto`` (bf16 on a GPU, where ROLL runs), float32
  ``fp32``; fp16 is refused (no loss scaling). ``reduce_dtype`` (default float32) is the gradient
  reduction dtype, posttrain's ``mixed_precision.reduce_dtype``.
- ``reshard_after_forward`` and ``offload_policy`` (torch's CPUOffloadPolicy) are posttrain's
  ``fsdp_config`` fields of the same names.
- ``wrap_policy.transformer_layer_cls_to_wrap`` names the sharding units (ROLL's default, the model's
  ``_no_split_modules``, is its decoder layers, as posttrain's empty list is). Wrapping embeddings,
  the LM head or single MoE experts as units of their own only changes which parameters are gathered
  together, not the values computed.
- Expert parallelism (``ep_size``, with ``efsdp_size`` sharding each expert group) only places the
  experts: ROLL's all-to-all dispatch is dropless (every token reaches its top-k experts, weighted as
  in the unsplit layer), so it computes what posttrain computes with each MoE layer's experts kept in
  its decoder layer's FSDP unit. Dropped, as Megatron's expert parallelism is
  (posttrain.config.dialects.roll_megatron).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

# ROLL role -> the FSDP2 strategy name ROLL runs it with
NAMES = {"actor_train": "fsdp2_train", "critic": "fsdp2_train", "reference": "fsdp2_infer"}
_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp32": "fp32", "float32": "fp32", "float": "fp32",
           "fp16": "fp16", "float16": "fp16", "half": "fp16"}  # ROLL's _parse_dtype spellings
_UNITS = "a sharding unit of its own only changes which parameters are gathered together (memory and communication), not the values computed; posttrain keeps it in its decoder layer's unit or the root's"
_NO_EFFECT = {
    "wrap_policy.wrap_embeddings": _UNITS,
    "wrap_policy.wrap_lm_output": _UNITS,
    "wrap_policy.moe_experts": _UNITS,
    "apply_expert_patch": "ROLL's patch that runs every expert on every rank so separately wrapped experts gather in step; posttrain never wraps experts apart from their layer (ROLL itself turns the patch off with transformers >= 5.2)",
    "apply_tiled_mlp": "computes each MLP in sequence chunks to lower peak memory: the same values (to float rounding); posttrain computes it whole",
    "tiled_num_shards": "the chunk count of apply_tiled_mlp: memory only",
    "model_type": "read by ROLL's tiled MLP only (memory only)",
    "moe_use_grouped_mm": "a grouped-matmul kernel for a rank's experts, read with expert parallelism only: the same values",
    "reduce_scatter_during_grad_accumulation": "when the gradients are reduce-scattered during accumulation: the same sums, a different schedule",
    "async_save_ckpt": "whether ROLL writes checkpoints in a background thread: the same files; posttrain writes them synchronously",
    "use_batched_model_update": "read nowhere in ROLL's source (8eb27cc); posttrain syncs weights to the rollout engine its own way",
}


def _dtype(ctx: Context, key: str, value: Any, native: str, *, reduce: bool) -> None:
    dtype = _DTYPES.get(value.lower()) if isinstance(value, str) else None
    if dtype in (None, "fp16"):
        why = "fp16 needs loss scaling, which posttrain does not do; use bf16" if dtype == "fp16" else f"expected bf16 or float32, got {value!r}"
        ctx.refuse(key, why, native, value)
    elif reduce:
        ctx.set(native, dtype, key, f"{value}: gradients reduced across devices in {dtype}")
    elif dtype == "fp32":
        ctx.set(native, "fp32", key, f"{value}: computes in fp32 (no autocast)")
    else:
        ctx.set(native, "auto", key, f"{value}: computes in bf16 on a GPU, as posttrain's auto does (fp32 on the CPU)")


def _fsdp_size(ctx: Context, key: str, value: Any, native: str, devices: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        ctx.refuse(key, f"expected a whole number of devices, got {value!r}", native, value)
    elif value <= 1 or value >= devices:
        ctx.set(native, -1, key, f"{value}: shards over all {devices} device(s) of the role (ROLL's 1-D mesh)")
    elif devices % value:
        ctx.refuse(key, f"{value} does not divide the role's {devices} devices: a (replicate, shard) mesh needs it; use a divisor of {devices}", native, value)
    else:
        ctx.set(native, value, key, f"{value}: {devices // value} replicas, each sharded over {value} devices (HSDP)")


def fsdp2(ctx: Context, role: str, section: str, name: str, devices: int) -> None:
    """A role's ROLL FSDP2 strategy -> its posttrain section's FSDP2 settings (module docstring)."""
    name_key, base = f"{role}.strategy_args.strategy_name", f"{role}.strategy_args.strategy_config"
    options = ctx.get(base) or {}
    ctx.consume(base)
    if name != NAMES[role]:
        ctx.refuse(name_key, f"ROLL runs {role} with {NAMES[role]}, not {name}", f"{section}.strategy", name)
        return
    if not isinstance(options, Mapping):
        ctx.refuse(base, f"expected a mapping of FSDP2 options, got {options!r}", None, options)
        return
    fsdp = f"{section}.fsdp_config"
    ctx.set(f"{section}.strategy", "fsdp2", name_key, "ROLL's FSDP2 is posttrain's FSDP2 (torch fully_shard)")
    if "param_dtype" not in options:  # ROLL's default is bf16, posttrain's auto
        ctx.drop(f"{base}.param_dtype", "not set: ROLL's default bf16, posttrain's auto (bf16 on a GPU)")
    ep = options.get("ep_size", 1)
    for sub, value in flat_options(options, "wrap_policy").items():
        key = f"{base}.{sub}"
        if value is None:
            ctx.drop(key, "null: ROLL's default")
        elif sub in ("param_dtype", "reduce_dtype"):
            if sub == "reduce_dtype" and name == "fsdp2_infer":
                ctx.drop(key, "fsdp2_infer computes no gradients: nothing is reduced")
            else:
                _dtype(ctx, key, value, f"{fsdp}.mixed_precision.{sub}", reduce=sub == "reduce_dtype")
        elif sub == "fsdp_size":
            _fsdp_size(ctx, key, value, f"{fsdp}.fsdp_size", devices)
        elif sub in ("reshard_after_forward", "offload_policy"):
            if isinstance(value, bool):
                ctx.set(f"{fsdp}.{sub}", value, key, "torch fully_shard's option of the same name")
            else:
                ctx.refuse(key, f"expected true or false, got {value!r}", f"{fsdp}.{sub}", value)
        elif sub == "wrap_policy.transformer_layer_cls_to_wrap":
            if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                ctx.set(f"{fsdp}.transformer_layer_cls_to_wrap", [value] if isinstance(value, str) else list(value), key, "these module classes are the sharding units")
            else:
                ctx.refuse(key, f"expected a module class name or a list of them, got {value!r}", f"{fsdp}.transformer_layer_cls_to_wrap", value)
        elif sub in ("ep_size", "efsdp_size"):
            if value == 1:
                ctx.drop(key, "1: no expert parallelism, as posttrain")
            elif sub == "efsdp_size" and ep == 1:
                ctx.drop(key, "read by ROLL only with expert parallelism (ep_size > 1)")
            elif isinstance(value, int) and not isinstance(value, bool) and value > 1:
                ctx.drop(key, f"{value}: places the experts over devices; ROLL's all-to-all dispatch is dropless, so the values are the unsplit MoE layer's, which posttrain computes with each layer's experts in its decoder layer's FSDP unit")
            else:
                ctx.refuse(key, f"expected a whole number of devices, got {value!r}", None, value)
        elif sub in _NO_EFFECT:
            ctx.drop(key, _NO_EFFECT[sub])
        else:
            ctx.refuse(key, "an FSDP2 option posttrain has no counterpart for (it translates fsdp_size, param_dtype, reduce_dtype, reshard_after_forward, offload_policy and wrap_policy.transformer_layer_cls_to_wrap); remove it", None, value)


def flat_options(options: Mapping[str, Any], nested: str) -> dict[str, Any]:
    """A strategy_config's options by name, the mapping under `nested` (FSDP2's wrap_policy,
    Megatron's additional_configs) spelled out as ``nested.key``."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if name == nested and isinstance(value, Mapping):
            out.update({f"{nested}.{k}": v for k, v in value.items()})
        else:
            out[str(name)] = value
    return out


# ---- docs/config-mapping.md rows (posttrain.config.tables.Rule) ----------------------------------
def rules() -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for role, name in NAMES.items():
        section = {"actor_train": "actor", "critic": "critic", "reference": "ref"}[role]
        base, ctx_name = f"{role}.strategy_args.strategy_config", (f"{role}.strategy_args.strategy_name", name)
        mapping = (f"{role}.device_mapping", "list(range(0,4))")
        out[f"{base}.fsdp_size"] = Rule(f"{section}.fsdp_config.fsdp_size", "at most 1 or at least the role's devices: -1 (shard over all); a divisor in between: the same (HSDP); another value refused", 2, (ctx_name, mapping))
        out[f"{base}.param_dtype"] = Rule(f"{section}.fsdp_config.mixed_precision.param_dtype", "bf16 (ROLL's default): auto (bf16 on a GPU); float32: fp32; fp16 refused (no loss scaling)", "float32", (ctx_name,))
        if name == "fsdp2_train":
            out[f"{base}.reduce_dtype"] = Rule(f"{section}.fsdp_config.mixed_precision.reduce_dtype", "bf16 or float32: the same", "bf16", (ctx_name,))
        out[f"{base}.reshard_after_forward"] = Rule(f"{section}.fsdp_config.reshard_after_forward", "the same", False, (ctx_name,))
        out[f"{base}.offload_policy"] = Rule(f"{section}.fsdp_config.offload_policy", "the same (torch's CPU offload policy)", True, (ctx_name,))
        out[f"{base}.wrap_policy.transformer_layer_cls_to_wrap"] = Rule(f"{section}.fsdp_config.transformer_layer_cls_to_wrap", "the same class names", ["Qwen2DecoderLayer"], (ctx_name,))
        out[f"{base}.ep_size"] = Rule(None, "expert parallelism places the experts; ROLL's dispatch is dropless, so the values are the unsplit MoE layer's (posttrain keeps each layer's experts in its FSDP unit)", 8, (ctx_name,))
        out[f"{base}.efsdp_size"] = Rule(None, "shards each expert group with ep_size above 1: placement only, the same values", 2, (ctx_name, (f"{base}.ep_size", 8)))
        for sub, why in _NO_EFFECT.items():
            out[f"{base}.{sub}"] = Rule(None, why, False, (ctx_name,))
    return out
