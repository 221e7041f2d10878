"""ROLL's Megatron strategies run on posttrain's FSDP2.

ROLL trains ``actor_train`` and ``critic`` with ``strategy_name: megatron_train`` and runs
``reference`` with ``megatron_infer``. Both build mcore_adapter's ``TrainingArguments`` from the
role's ``training_args`` updated by ``strategy_config``, then overwrite ``max_grad_norm`` with the
pipeline's (roll/distributed/strategy/megatron_strategy.py; the fields are
mcore_adapter/training_args.py). What each option does to the numbers decides its translation:

- Parallel layouts (TP, PP, virtual PP, EP, sequence parallelism, the pipeline split and layout),
  the distributed optimizer, overlap and kernel fusions change which device computes what, not what
  is computed (to float rounding). posttrain's FSDP2 shards the role over the devices its
  ``device_mapping`` gives; ROLL's optimizer-step arithmetic counts data-parallel ranks as devices /
  (TP x PP x CP), which posttrain.config.dialects.roll.mini_batch keeps, so the global batch is the
  same. Expert parallelism is a layout too when the dispatch is dropless (Megatron's without
  ``moe_expert_capacity_factor``, ROLL's FSDP2 all-to-all): every token reaches the same top-k
  experts with the same weights as in the unsplit MoE layer, which is what posttrain computes with
  each layer's experts kept in its decoder layer's FSDP unit.
- ``context_parallel_size`` > 1 splits each sequence over that many devices: posttrain's Ulysses
  sequence parallelism of the same size (``<role>.ulysses_sequence_parallel_size``): the same
  attention result, the heads exchanged instead of the keys and values.
- Recomputation (``recompute_granularity`` full or selective, ``recompute_modules``,
  ``moe_layer_recompute``) trades memory for time with the same numbers: the trained role's gradient
  checkpointing (whole decoder layers). posttrain's Ulysses does not split a recomputation, so with
  context parallelism the recomputation is dropped (the same numbers, more activation memory).
  Under Megatron, ROLL does not read ``model_args.disable_gradient_checkpointing``.
- Precision: ``bf16`` (else ``training_args.bf16``, which ROLL sets from ``model_args.dtype: bf16``,
  its default) computes in bf16 with fp32 main weights: posttrain's ``param_dtype: auto``; without
  bf16 the model computes in fp32: ``fp32``; fp16 is refused (no loss scaling).
- MoE router loss: for a mixture-of-experts model Megatron adds the router's load-balancing loss in
  training (mcore_adapter gives the Qwen-MoE and Mixtral families load-balancing type aux_loss),
  with ``moe_aux_loss_coeff`` (else ``model_args.moe_aux_loss_coef``, else the model's
  ``router_aux_loss_coef``): the role's ``actor.moe_aux_loss_coef`` / ``critic.moe_aux_loss_coef``
  (the same Switch loss over each micro-batch's routed tokens; null reads the model's coefficient
  when it loads, 0 for a dense model). ROLL's FSDP2 and DeepSpeed strategies add none (the model
  returns its router logits and no loss reads them). posttrain's SFT and DPO losses add it as the
  RL actor's does; its distillation loss does not, so in ROLL's distillation files a positive
  coefficient, or an MoE model known from the file (experts split over devices) or from its
  config.json, is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects.model_files import model_json
from posttrain.config.dialects.roll_fsdp2 import flat_options
from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

# ROLL role -> (posttrain section, the Megatron strategy ROLL runs it with)
NAMES = {"actor_train": ("actor", "megatron_train"), "critic": ("critic", "megatron_train"),
         "reference": ("ref", "megatron_infer")}
_GC = {"actor": "model.enable_gradient_checkpointing", "critic": "critic.model.enable_gradient_checkpointing"}
_PLACE = "changes which device computes what, not the values (to float rounding): posttrain's FSDP2 shards the role over the devices of its device_mapping"
_KERNEL = "a fused kernel of the same computation (to float rounding); posttrain runs torch's and transformers' own"
_SCHEDULE = "schedules communication against compute: the same sums, hence the same updates"
NO_EFFECT: dict[str, str] = {
    "tensor_model_parallel_size": f"splits each layer's matmuls over TP devices: {_PLACE} (ROLL's data-parallel ranks, devices / (TP x PP x CP), still size the optimizer step)",
    "pipeline_model_parallel_size": f"places consecutive layers on PP devices: {_PLACE} (ROLL's data-parallel ranks, devices / (TP x PP x CP), still size the optimizer step)",
    "virtual_pipeline_model_parallel_size": f"interleaves the pipeline's layer chunks: {_PLACE}",
    "pipeline_model_parallel_layout": f"which layers each pipeline stage holds: {_PLACE}",
    "account_for_embedding_in_pipeline_split": f"counts the embedding as a layer when splitting the pipeline: {_PLACE}",
    "account_for_loss_in_pipeline_split": f"counts the loss as a layer when splitting the pipeline: {_PLACE}",
    "sequence_parallel": f"splits the norms and dropout of tensor parallelism along the sequence: {_PLACE}",
    "expert_tensor_parallel_size": f"splits each expert's matmuls: {_PLACE}",
    "use_distributed_optimizer": "shards the optimizer state over data-parallel ranks (as ZeRO-1): posttrain's FSDP2 shards it too; the same updates",
    "distrib_optim_fully_reshardable": "the layout of the distributed optimizer's checkpoint; posttrain saves its own checkpoint format",
    "overlap_grad_reduce": _SCHEDULE,
    "moe_shared_expert_overlap": _SCHEDULE + " (the shared experts run beside the routed experts' dispatch)",
    "moe_token_dispatcher_type": "how tokens travel to their experts (allgather or alltoall); without a capacity factor both are dropless: every token reaches its top-k experts, as in posttrain's unsplit MoE layer",
    "moe_grouped_gemm": _KERNEL + " (one grouped matmul for a rank's experts)",
    "bias_activation_fusion": _KERNEL,
    "apply_rope_fusion": _KERNEL,
    "cross_entropy_loss_fusion": _KERNEL + " (log-probabilities and entropy)",
    "additional_configs.moe_permute_fusion": _KERNEL + " (the token permutation of the MoE dispatch)",
    "max_grad_norm": "ROLL overwrites it with the pipeline's max_grad_norm (posttrain's actor.grad_clip) before Megatron reads it",
}
_RECOMPUTE = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules", "moe_layer_recompute")


def megatron(ctx: Context, role: str, name: str) -> None:
    """A role's ROLL Megatron strategy -> its posttrain section's FSDP2 settings (module docstring)."""
    section, expected = NAMES[role]
    name_key, base = f"{role}.strategy_args.strategy_name", f"{role}.strategy_args.strategy_config"
    options = ctx.get(base) or {}
    ctx.consume(base)
    if name != expected:
        ctx.refuse(name_key, f"ROLL runs {role} with {expected}, not {name}", f"{section}.strategy", name)
        return
    if not isinstance(options, Mapping):
        ctx.refuse(base, f"expected a mapping of {name} options, got {options!r}", None, options)
        return
    leaves = flat_options(options, "additional_configs")
    cp = leaves.get("context_parallel_size", 1) or 1
    trained = name == "megatron_train"
    moe = ("; the MoE router load-balancing loss megatron_train adds is the role's moe_aux_loss_coef (refused in distillation files, "
           "whose loss posttrain computes without it)") if trained else ""
    if trained:  # set first: the report names the strategy line last for this key
        _aux_loss(ctx, role, base, leaves)
        # Megatron-core's optimizer groups exempt biases and one-dimensional parameters (norm
        # weights) from weight decay; ROLL's megatron_train builds its optimizer through them.
        ctx.set(f"{section}.optim.decay_bias_and_norm", False, name_key,
                "Megatron's optimizer exempts biases and norm weights (1-D parameters) from weight decay")
    ctx.set(f"{section}.strategy", "fsdp2", name_key,
            f"ROLL's {name} runs as posttrain's FSDP2 (torch fully_shard over the role's devices): its parallel layouts, "
            f"overlaps and fusions change where and how fast the same numbers are computed{moe}")
    _precision(ctx, role, section, base, leaves)
    if trained:
        _recompute(ctx, role, section, base, leaves, cp)
    else:  # megatron_infer: forward passes only
        for sub in [s for s in leaves if s in _RECOMPUTE]:
            leaves.pop(sub)
            ctx.drop(f"{base}.{sub}", "the reference runs no backward pass: nothing to recompute")
    for sub, value in leaves.items():
        _option(ctx, section, f"{base}.{sub}", sub, value, trained)


def _option(ctx: Context, section: str, key: str, sub: str, value: Any, trained: bool) -> None:
    if value is None:
        ctx.drop(key, "null: not set (mcore_adapter's default)")
    elif sub == "context_parallel_size":
        _context_parallel(ctx, section, key, value)
    elif sub == "expert_model_parallel_size":
        if value == 1:
            ctx.drop(key, "1: every expert on each device of the role, as posttrain")
        elif isinstance(value, int) and not isinstance(value, bool) and value > 1:
            ctx.drop(key, f"{value}: experts split over {value} devices with a dropless dispatch compute what the unsplit MoE layer computes; posttrain keeps each layer's experts in its decoder layer's FSDP unit")
        else:
            ctx.refuse(key, f"expected a whole number of devices, got {value!r}", None, value)
    elif sub == "moe_z_loss_coeff" and trained:
        _z_loss(ctx, section, key, value)
    elif sub == "moe_z_loss_coeff":
        ctx.drop(key, "megatron_infer runs forward passes only: no router loss")
    elif sub == "moe_expert_capacity_factor":
        ctx.refuse(key, "drops the tokens past an expert's capacity; posttrain's MoE layers (transformers') route every token: remove it (null is dropless)", None, value)
    elif sub in NO_EFFECT:
        ctx.drop(key, NO_EFFECT[sub] if trained or sub not in ("use_distributed_optimizer", "overlap_grad_reduce", "distrib_optim_fully_reshardable", "max_grad_norm")
                 else "megatron_infer builds no optimizer: nothing to shard, reduce or clip")
    else:
        ctx.refuse(key, "an option of ROLL's megatron strategies posttrain has no counterpart for (it translates the parallel sizes, bf16, "
                   "recomputation, moe_aux_loss_coeff and moe_z_loss_coeff, and drops layouts, overlaps and fused kernels); remove it", None, value)


def _z_loss(ctx: Context, section: str, key: str, value: Any) -> None:
    """Megatron's router z-loss weight: the role's moe_z_loss_coef (Megatron adds it to every MoE
    model it trains, whatever the load-balancing type)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        ctx.refuse(key, f"expected a number >= 0, got {value!r}", f"{section}.moe_z_loss_coef", value)
    else:
        ctx.set(f"{section}.moe_z_loss_coef", float(value), key, "Megatron adds it x each micro-batch's router z-loss (mean squared logsumexp of the router logits) to the loss")


def _context_parallel(ctx: Context, section: str, key: str, value: Any) -> None:
    native = f"{section}.ulysses_sequence_parallel_size"
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        ctx.refuse(key, f"expected a whole number of devices, got {value!r}", native, value)
    elif value == 1:
        ctx.drop(key, "1: each sequence on one device, as posttrain without Ulysses")
    else:
        ctx.set(native, value, key, f"{value}: each sequence split over {value} devices by Ulysses sequence parallelism (the same attention result; heads exchanged by all-to-all)")


def _precision(ctx: Context, role: str, section: str, base: str, leaves: dict[str, Any]) -> None:
    """bf16 / fp16 of strategy_config, else training_args', which ROLL sets from model_args.dtype."""
    bf16, fp16 = leaves.pop("bf16", None), leaves.pop("fp16", None)
    native = f"{section}.fsdp_config.mixed_precision.param_dtype"
    for sub, value in (("bf16", bf16), ("fp16", fp16)):
        if value is not None and not isinstance(value, bool):
            ctx.refuse(f"{base}.{sub}", f"expected true or false, got {value!r}", native, value)
            return
    if fp16:
        ctx.refuse(f"{base}.fp16", "fp16 needs loss scaling, which posttrain does not do; use bf16 (bf16: true)", native, True)
        return
    if fp16 is False:
        ctx.drop(f"{base}.fp16", "false: no fp16")
    if bf16 is None:  # ROLL's worker config sets training_args.bf16 from model_args.dtype (default bf16)
        dtype = ctx.get(f"{role}.model_args.dtype", "bf16")
        bf16 = bool(ctx.get(f"{role}.training_args.bf16")) or dtype == "bf16"
        if bf16:
            ctx.drop(f"{base}.bf16", f"not set: training_args.bf16, which ROLL sets from model_args.dtype {dtype}: bf16 compute, posttrain's auto (bf16 on a GPU)")
        else:
            ctx.set(native, "fp32", f"{base}.bf16", f"not set, and model_args.dtype {dtype}: the model computes in fp32 (no autocast)")
    elif bf16:
        ctx.drop(f"{base}.bf16", "true: bf16 compute, posttrain's auto (bf16 on a GPU; fp32 master weights where it trains)")
    else:
        ctx.set(native, "fp32", f"{base}.bf16", "false: the model computes in fp32 (no autocast)")


def _aux_loss(ctx: Context, role: str, base: str, leaves: dict[str, Any]) -> None:
    """The MoE router's load-balancing loss. Megatron's coefficient is strategy_config.moe_aux_loss_coeff,
    else model_args.moe_aux_loss_coef (ROLL's model provider copies it only when the former is unset),
    else the model's router_aux_loss_coef (mcore_adapter maps it onto moe_aux_loss_coeff, with
    load-balancing type aux_loss for the Qwen-MoE and Mixtral families): posttrain's
    actor.moe_aux_loss_coef, whose null reads the same config.json entry when the model loads."""
    model_key = f"{role}.model_args.moe_aux_loss_coef"
    given = [(k, v) for k, v in ((f"{base}.moe_aux_loss_coeff", leaves.pop("moe_aux_loss_coeff", None)), (model_key, ctx.get(model_key)))
             if v is not None]
    ctx.consume(model_key)
    for key, coef in given[1:]:
        ctx.drop(key, f"megatron_train takes {given[0][0]} ({given[0][1]!r}) over it")
    stage = _supervised_stage(ctx)
    # actor_train (sft_train) -> actor, critic -> critic; posttrain's distillation loss has no router term
    native = None if stage == "distillation" else f"{NAMES[role][0]}.moe_aux_loss_coef"
    how = (f"posttrain adds the router loss to the RL actor's and critic's losses and to the SFT and DPO losses (actor.moe_aux_loss_coef, "
           f"critic.moe_aux_loss_coef), not to its {stage} loss: set strategy_config.moe_aux_loss_coeff: 0 to train without it")
    ep = leaves.get("expert_model_parallel_size", 1)
    moe = isinstance(ep, int) and not isinstance(ep, bool) and ep > 1
    if given:
        key, coef = given[0]
        if isinstance(coef, bool) or not isinstance(coef, (int, float)) or coef < 0:
            ctx.refuse(key, f"expected a number >= 0, got {coef!r}", native, coef)
        elif coef == 0:
            ctx.drop(key, "0: no router load-balancing loss (moe_aux_loss_coef's default)")
        elif native is None:
            ctx.refuse(key, f"megatron_train adds the MoE router's load-balancing loss x {coef!r} to ROLL's {stage} loss; {how}", None, coef)
        else:
            ctx.set(native, float(coef), key, f"Megatron adds {coef!r} x the router's load-balancing loss (aux_loss) of each micro-batch to the loss")
        return
    if native is not None:
        ctx.set(native, None, f"{role}.strategy_args.strategy_name",
                "no moe_aux_loss_coeff: Megatron weighs the router's load-balancing loss by the model's router_aux_loss_coef; null reads it from "
                "config.json when the model loads (0 for a dense model)")
    elif moe:
        leaves.pop("expert_model_parallel_size")
        ctx.refuse(f"{base}.expert_model_parallel_size",
                   f"{ep}: experts split over devices mean a mixture-of-experts model, to whose loss megatron_train adds the router's load-balancing "
                   f"loss (coefficient: the model's router_aux_loss_coef, e.g. 0.001 for Qwen3-MoE); {how}", None, ep)
    else:
        found = _model_router_coefficient(ctx.get(f"{role}.model_args.model_name_or_path") or ctx.get("pretrain"))
        if found is not None:  # the model is here (a run's machine): its config says whether it routes with a loss
            path, coef = found
            ctx.refuse(f"{base}.moe_aux_loss_coeff", f"not set: the model {path} is a mixture-of-experts model with router_aux_loss_coef {coef}, which "
                       f"megatron_train adds to ROLL's {stage} loss as the router's load-balancing loss; {how}", None, None)


# The keys that make a file ROLL's DPO pipeline (posttrain.config.dialects.roll.dpo_pipeline, which runs later)
_DPO_KEYS = ("ipo", "beta", "label_smoothing", "chosen_key", "rejected_key")


def _supervised_stage(ctx: Context) -> str | None:
    """'SFT', 'distillation' or 'DPO' when the file is ROLL's SFT, distillation or DPO pipeline (no RL actor loss), else None."""
    kind = ctx.native_get("algorithm.kind")  # roll_sft's / roll_distill's pipeline handler runs first
    if kind in ("sft", "distill"):
        return "SFT" if kind == "sft" else "distillation"
    return "DPO" if any(ctx.has(k) for k in _DPO_KEYS) else None


def _model_router_coefficient(path: Any) -> tuple[str, float] | None:
    """(path, router_aux_loss_coef) when the role's model is on this machine (a directory, or a hub
    name in the local Hugging Face cache, read offline) and its config.json (or a nested text
    config) has experts and a positive router_aux_loss_coef: the families whose coefficient
    mcore_adapter hands Megatron (Qwen-MoE, Mixtral). None otherwise, as on a machine without it."""
    config = model_json(path, "config.json")
    if config is None:
        return None
    nodes = [config]
    while nodes:
        node = nodes.pop()
        if not isinstance(node, dict):
            continue
        experts = node.get("num_experts") or node.get("num_local_experts") or 0
        coef = node.get("router_aux_loss_coef")
        if isinstance(experts, int) and experts > 1 and isinstance(coef, (int, float)) and coef > 0:
            return path, coef
        nodes.extend(v for v in node.values() if isinstance(v, dict))
    return None


def moe_aux_loss_coef(ctx: Context, role: str) -> None:
    """``model_args.moe_aux_loss_coef`` outside megatron_train: ROLL's FSDP2 and DeepSpeed strategies
    only make the model return its router logits, and no loss reads them."""
    key = f"{role}.model_args.moe_aux_loss_coef"
    if ctx.has(key) and key not in ctx.handled:
        ctx.consume(key)
        ctx.drop(key, "only ROLL's megatron_train adds a router loss; its other strategies at most have the model return its router logits, which no loss reads (actor.moe_aux_loss_coef stays 0, as they train)")


def _recompute(ctx: Context, role: str, section: str, base: str, leaves: dict[str, Any], cp: Any) -> None:
    """Megatron's recomputation -> the trained role's gradient checkpointing (module docstring)."""
    flag = f"{role}.model_args.disable_gradient_checkpointing"
    if ctx.has(flag):
        ctx.consume(flag)
        ctx.drop(flag, "ROLL's megatron_train does not read it: strategy_config.recompute_granularity decides what is recomputed")
    subs = {s: leaves.pop(s) for s in _RECOMPUTE if s in leaves}
    granularity = subs.get("recompute_granularity")
    if granularity not in (None, "full", "selective"):
        ctx.refuse(f"{base}.recompute_granularity", f"expected full, selective or null, got {granularity!r}", _GC[section], granularity)
        return
    for sub, value in subs.items():
        key = f"{base}.{sub}"
        active = value not in (None, False) and (sub in ("recompute_granularity", "moe_layer_recompute") or granularity is not None)
        if not active:
            ctx.drop(key, f"{value!r}: nothing recomputed by it" if sub in ("recompute_granularity", "moe_layer_recompute")
                     else "read by Megatron only with recompute_granularity set")
        elif isinstance(cp, int) and cp > 1:
            ctx.drop(key, f"recomputation only saves memory (the same numbers); with context_parallel_size {cp} posttrain runs Ulysses, which does not split a recomputation, so the role keeps its activations")
        else:
            what = "the whole decoder layer" if sub != "moe_layer_recompute" and granularity == "full" else "whole decoder layers (more than Megatron's selected modules: the same numbers, less memory, more time)"
            ctx.set(_GC[section], True, key, f"{value!r}: gradient checkpointing recomputes {what} in the backward pass")


# ---- docs/config-mapping.md rows (posttrain.config.tables.Rule) ----------------------------------
def rules() -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for role, (section, name) in NAMES.items():
        base, ctx_name = f"{role}.strategy_args.strategy_config", ((f"{role}.strategy_args.strategy_name", name),)
        out[f"{base}.context_parallel_size"] = Rule(f"{section}.ulysses_sequence_parallel_size", "above 1: Ulysses sequence parallelism of that size (the same attention result); 1: nothing", 2, ctx_name)
        out[f"{base}.bf16"] = Rule(f"{section}.fsdp_config.mixed_precision.param_dtype", "true (or absent with model_args.dtype bf16, ROLL's default): nothing (auto computes in bf16 on a GPU); false: fp32; fp16: true is refused (no loss scaling)", False, ctx_name)
        out[f"{base}.expert_model_parallel_size"] = Rule(None, "experts split over devices with a dropless dispatch compute what the unsplit MoE layer computes; in megatron_train above 1 (an MoE model) SFT and DPO files are refused unless moe_aux_loss_coeff is 0 (posttrain adds the router loss to the RL actor's and critic's losses)", 1, ctx_name)
        for sub, why in NO_EFFECT.items():
            out[f"{base}.{sub}"] = Rule(None, why, True, ctx_name)
        if name == "megatron_train":
            gc = _GC[section]
            out[f"{base}.recompute_granularity"] = Rule(gc, "full or selective: true (whole decoder layers recomputed: the same numbers); dropped with context_parallel_size above 1 (Ulysses does not split a recomputation)", "full", ctx_name)
            out[f"{base}.moe_layer_recompute"] = Rule(gc, "true: true, as recompute_granularity", True, ctx_name)
            for sub in ("recompute_modules", "recompute_method", "recompute_num_layers"):
                out[f"{base}.{sub}"] = Rule(gc, "with recompute_granularity: true (whole decoder layers: the same numbers, less memory); without it dropped (Megatron reads it only then)", "moe" if sub == "recompute_modules" else "uniform" if sub == "recompute_method" else 1, (*ctx_name, (f"{base}.recompute_granularity", "selective")))
            out[f"{base}.moe_aux_loss_coeff"] = Rule(f"{section}.moe_aux_loss_coef", "the same coefficient (absent: null, the model's router_aux_loss_coef); in SFT and DPO files 0 dropped, another value refused (no router term in those losses)", 0.001, ctx_name)
        else:
            for sub in _RECOMPUTE:
                out[f"{base}.{sub}"] = Rule(None, "the reference runs no backward pass: nothing to recompute", "full", ctx_name)
        trained = section != "ref"
        out[f"{role}.model_args.moe_aux_loss_coef"] = Rule(f"{section}.moe_aux_loss_coef" if trained else None, "megatron_train: the role's coefficient when strategy_config.moe_aux_loss_coeff is absent; other strategies and the reference: dropped (no loss reads the router logits)", 0.001 if trained else 0.0, ctx_name if trained else ())
    return out
