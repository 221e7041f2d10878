"""verl's Megatron trainer (``--config-name ppo_megatron_trainer``) on posttrain's FSDP2.

verl's Megatron workers read each role's ``megatron`` section (actor, reference, critic, reward
model; verl/trainer/config/engine/megatron.yaml) and, for the actor and critic, an ``optim`` section
that is Megatron's optimizer (verl/utils/megatron/optimizer.py). posttrain trains every role with
FSDP2, so each key lands on what it means there:

- **Layout** (tensor/pipeline/virtual-pipeline/expert/expert-tensor parallel sizes, sequence
  parallelism, the distributed optimizer, mbridge, packing, fusions, DDP buckets and overlap):
  where the work runs, not the numbers. FSDP2 shards the role over the same devices; the global
  mini-batch is ``ppo_mini_batch_size x rollout.n`` responses whatever the data-parallel size (verl
  divides it by world / (TP x PP x CP) per rank; posttrain by its own data-parallel groups). Dropped.
- **Expert parallelism** > 1 is layout too: verl leaves Megatron's MoE layer dropless (no
  ``moe_expert_capacity_factor``; verl/models/mcore/config_converter.py) and turns its load-balancing
  loss off (``moe_router_load_balancing_type: none``), so the experts split over devices compute what
  the unsplit layer computes. A capacity factor (dropped tokens) is refused. An override of the
  balancing type to ``aux_loss`` is the role's ``actor.moe_aux_loss_coef`` / ``critic.moe_aux_loss_coef``
  (``moe_aux_loss_coeff``, else the model's router_aux_loss_coef: null); with verl's ``none`` the
  coefficient is not read. ``moe_z_loss_coeff`` (Megatron's router z-loss, added whatever the
  balancing type) is the role's ``moe_z_loss_coef``. The expert bias (``moe_router_enable_expert_bias``)
  with ``moe_router_bias_update_rate: 0`` stays as loaded, the model's own routing; a positive rate
  (balancing by moving the bias) is refused.
- ``context_parallel_size`` -> the role's Ulysses sequence parallelism of that size (both split one
  sequence over that many devices and compute exact attention).
- ``param_offload`` / ``grad_offload`` / ``optimizer_offload`` -> the role's ``fsdp_config``
  offload keys (FSDP2 offloads gradients with their parameters).
- ``override_transformer_config``: ``recompute_granularity`` full/selective -> gradient checkpointing
  (recomputation; the other recompute keys say which layers, posttrain recomputes whole decoder
  layers); kernels, fusions and pipeline splits dropped; anything that changes the model's
  computation (dropout, MoE capacity and balancing losses, ...) refused.
- ``seed`` (verl seeds torch/numpy/random of the role's processes with it) -> ``trainer.seed``.
- ``dtype: bfloat16``: bf16 compute with fp32 master weights, what posttrain's mixed precision does
  on a GPU; float16 (loss scaling) is refused.
- ``optim.optimizer: adam`` is Megatron's Adam: decoupled weight decay (AdamW: TransformerEngine's or
  Apex's FusedAdam in AdamW mode, torch's AdamW without them), with no weight decay on biases and
  one-dimensional parameters (megatron.core.optimizer) -> adamw with ``decay_bias_and_norm: false``.
  verl passes Megatron no betas: ``optim.betas`` is not read, Megatron's adam_beta1/adam_beta2 (0.9,
  0.999, or override_optimizer_config's) apply.
- ``model.enable_gradient_checkpointing`` and ``model.use_remove_padding`` are not read by verl's
  Megatron workers (recomputation is ``recompute_granularity``, packing ``megatron.use_remove_padding``,
  which lands on posttrain's use_remove_padding): dropped with the Megatron tree.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.source import leaves
from posttrain.config.dialects.verl_release import value_of
from posttrain.config.tables import Rule

# verl's role prefix -> posttrain's section
ROLES = {"actor_rollout_ref.actor": "actor", "actor_rollout_ref.ref": "ref", "critic": "critic"}
# posttrain's gradient-checkpointing switch of each role that trains
GRADIENT_CHECKPOINTING = {"actor": "model.enable_gradient_checkpointing", "critic": "critic.model.enable_gradient_checkpointing"}
_SAME = "where the work runs, not the numbers: posttrain's FSDP2 shards the role over the same devices"
_EP = ("expert parallelism: experts split over devices; verl keeps Megatron's MoE layer dropless (no capacity factor) "
       "and without a balancing loss, so it computes what the unsplit layer computes")
_WEIGHTS = ("where verl reads the initial weights: a Megatron-format copy of model.path; posttrain reads model.path itself "
            "(the same weights in Hugging Face format)")
LAYOUT = {
    "tensor_model_parallel_size": f"tensor parallelism, {_SAME}",
    "pipeline_model_parallel_size": f"pipeline parallelism, {_SAME}",
    "virtual_pipeline_model_parallel_size": f"interleaved pipeline stages, {_SAME}",
    "expert_model_parallel_size": f"{_EP}; {_SAME}",
    "expert_tensor_parallel_size": f"tensor parallelism inside each expert, {_SAME}",
    "sequence_parallel": f"Megatron's sequence parallelism inside tensor parallelism, {_SAME}",
    "use_distributed_optimizer": "shards the optimizer state over data-parallel ranks, as FSDP2 does",
    "use_dist_checkpointing": _WEIGHTS,
    "dist_checkpointing_path": _WEIGHTS,
    "dist_checkpointing_prefix": _WEIGHTS,
    "use_mbridge": "how verl converts Hugging Face weights into Megatron's modules; posttrain trains the Hugging Face model itself",
    "vanilla_mbridge": "how verl converts Hugging Face weights into Megatron's modules; posttrain trains the Hugging Face model itself",
    "forward_only": "verl marks the reference as forward-only; posttrain's reference never trains",
    # verl 0.10's Megatron engine config (verl/workers/config/engine.py)
    "use_megatron_fsdp": f"Megatron's own FSDP sharding, {_SAME}",
    "dist_ckpt_optim_fully_reshardable": "the layout of Megatron's distributed-optimizer checkpoints; posttrain writes its own (DCP)",
    "distrib_optim_fully_reshardable_mem_efficient": "the layout of Megatron's distributed-optimizer checkpoints; posttrain writes its own (DCP)",
    "entropy_from_logits_with_chunking": "the token entropy computed in chunks (memory only); posttrain always chunks it",
    "entropy_from_logits_chunk_size": "the token entropy computed in chunks (memory only); posttrain always chunks it",
    "pad_bshd_to_minibatch_max": "the padded shape of Megatron's unpacked batches; padding is masked out of every number",
    "pad_to_length": "the padded shape of Megatron's batches; padding is masked out of every number",
    "pad_to_length_bucket": "the padded shape of Megatron's batches; padding is masked out of every number",
}
# verl 0.10's Megatron engine keys that change the run, refused unless at verl's default
_NEWER = {
    "dynamic_context_parallel": "Megatron's dynamic context parallelism (sequences split over a varying number of ranks); posttrain's "
                                "sequence parallelism is the role's fixed ulysses_sequence_parallel_size (megatron.context_parallel_size)",
    "max_seqlen_per_dp_cp_rank": "a bound of Megatron's dynamic context parallelism, which posttrain does not do",
    "qat": "quantization-aware training (fake-quantized weights in the training forward); posttrain trains in the role's compute dtype",
    "router_replay": "routing replay of a role other than the actor; posttrain replays the actor's routing only (actor.router_replay.mode R2)",
}
_DDP_LAYOUT = frozenset({"overlap_grad_reduce", "overlap_param_gather", "bucket_size", "average_in_collective", "align_param_gather",
                         "use_distributed_optimizer", "num_distributed_optimizer_instances", "check_for_nan_in_grad"})
_KERNELS = frozenset({"attention_backend", "apply_rope_fusion", "bias_activation_fusion", "bias_dropout_fusion", "masked_softmax_fusion",
                      "gradient_accumulation_fusion", "moe_permute_fusion", "persist_layer_norm", "cross_entropy_loss_fusion",
                      "moe_grouped_gemm", "moe_token_dispatcher_type", "moe_enable_deepep", "moe_shared_expert_overlap",
                      # verl 0.10's examples (Ascend and Qwen3.5 ones): kernel implementations of the same operations
                      "use_flash_attn", "use_fused_rmsnorm", "use_fused_swiglu", "use_naive_l2norm", "use_fused_mhc", "apply_dsa_kernel_fusion"})
# TransformerConfig keys that say how the work is split over devices (verl 0.10's examples)
_OTC_LAYOUT = frozenset({"sequence_parallel", "use_distributed_optimizer", "context_parallel_algo", "cp_partition_mode", "sequence_packing_scheduler"})
_PIPELINE = frozenset({"deallocate_pipeline_outputs", "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                       "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage", "pipeline_model_parallel_layout"})
_WHICH_RECOMPUTED = frozenset({"recompute_method", "recompute_num_layers", "recompute_modules"})
_CHANGES = {
    "moe_expert_capacity_factor": "a capacity factor drops the tokens over each expert's capacity; posttrain's MoE layers (the Hugging Face model's) drop none",
    "moe_pad_expert_input_to_capacity": "pads experts to a capacity, which only a capacity factor sets; posttrain's MoE layers drop and pad nothing",
    "moe_token_drop_policy": "which tokens a capacity factor drops; posttrain's MoE layers drop none",
    "hidden_dropout": "dropout in Megatron's layers; posttrain's model takes its dropout from its config.json: set it with actor_rollout_ref.model.override_config",
    "attention_dropout": "dropout in Megatron's attention; posttrain's model takes its dropout from its config.json: set it with actor_rollout_ref.model.override_config",
}
_ROUTER_DTYPE = ("the precision of the MoE router's computation (rounding only: the same routing rule); posttrain computes the "
                 "router in the role's compute dtype (fsdp_config.mixed_precision.param_dtype)")
_ADAM = ("Megatron's adam: decoupled weight decay (AdamW) with none on biases and one-dimensional parameters "
         "(posttrain: adamw, decay_bias_and_norm false)")
_MEGATRON_OPT = {"adam_beta1": ("betas", 0), "adam_beta2": ("betas", 1), "adam_eps": ("eps", None), "sgd_momentum": ("momentum", None)}
_OPT_PLACEMENT = frozenset({"optimizer_cpu_offload", "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d", "pin_cpu_grads", "pin_cpu_params"})


def is_megatron(ctx: Any, prefix: str) -> bool:
    """Whether verl runs the role at ``prefix`` with its Megatron workers (``strategy: megatron``)."""
    return ctx.get(f"{prefix}.strategy") == "megatron"


def strategies(ctx: Any) -> None:
    """``strategy: megatron`` (or 0.10's ``veomni``) names verl's backend: posttrain's is FSDP2, onto
    which the role's ``megatron`` (``veomni``) keys translate. With the Megatron tree, model.enable_gradient_checkpointing is
    not read by verl (recomputation is override_transformer_config.recompute_granularity)."""
    for prefix in ROLES:
        key = f"{prefix}.strategy"
        if ctx.get(key) == "veomni":
            ctx.consume(key)
            ctx.drop(key, f"veomni: verl 0.10's VeOmni engine (FSDP2 and Ulysses, as posttrain); {prefix}.veomni translates onto posttrain's FSDP2")
        if ctx.get(key) == "megatron":
            ctx.consume(key)
            ctx.drop(key, f"megatron: verl's Megatron workers; posttrain trains with FSDP2, onto which {prefix}.megatron translates")
    unread = {"actor_rollout_ref.model.enable_gradient_checkpointing": "they recompute by actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity",
              "actor_rollout_ref.model.use_remove_padding": "they pack sequences by actor_rollout_ref.actor.megatron.use_remove_padding (true by default)"}
    for key, why in unread.items():
        if is_megatron(ctx, "actor_rollout_ref.actor") and ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, f"not read by verl's Megatron workers: {why}")


def megatron(ctx: Any) -> None:
    """Each role's ``megatron`` section (module docstring)."""
    for prefix, role in ROLES.items():
        section = ctx.get(f"{prefix}.megatron")
        if not isinstance(section, dict):
            continue
        _offload(ctx, prefix, role, section)
        for name, value in leaves(section, whole=frozenset({"override_mcore_model_config"})).items():
            key = f"{prefix}.megatron.{name}"
            if ctx.has(key) and key not in ctx.handled:
                ctx.consume(key)
                _one(ctx, prefix, role, key, name, value)


def _one(ctx: Any, prefix: str, role: str, key: str, name: str, value: Any) -> None:
    head, _, rest = name.partition(".")
    if head in LAYOUT:
        ctx.drop(key, LAYOUT[head])
    elif head == "use_remove_padding":
        _packing(ctx, role, key, value)
    elif head == "context_parallel_size":
        _context_parallel(ctx, prefix, role, key, value)
    elif head == "seed":
        _seed(ctx, prefix, key, value)
    elif head == "dtype":
        if value in ("bfloat16", "bf16"):
            ctx.drop(key, "bf16 compute with fp32 master weights: what posttrain's fsdp_config.mixed_precision.param_dtype auto does on a GPU")
        else:
            ctx.refuse(key, f"{value!r}: Megatron's fp16 trains with loss scaling, which posttrain does not do; use bfloat16", None, value)
    elif head == "override_transformer_config":
        _transformer(ctx, prefix, role, key, rest, value)
    elif head == "override_ddp_config":
        if value in ({}, None) or rest in _DDP_LAYOUT:
            ctx.drop(key, f"Megatron DDP's gradient buckets and communication overlap, {_SAME}")
        else:
            ctx.refuse(key, f"an option of Megatron's DDP ({rest}) that posttrain's FSDP2 has no counterpart of; remove it", None, value)
    elif head == "router_replay" and role == "actor":
        _router_replay(ctx, key, rest, value)
    elif head in _NEWER:
        ctx.refuse_unless_default(key, _NEWER[head], None, value)
    elif head == "override_mcore_model_config":
        if value in ({}, None):
            ctx.drop(key, "empty: nothing overridden")
        else:
            ctx.refuse(key, "options of Megatron's model class; posttrain builds the Hugging Face model from its config.json (actor_rollout_ref.model.override_config)", None, value)
    else:
        ctx.refuse(key, f"not a key of verl's Megatron engine config ({prefix}.megatron)", None, value)


def _offload(ctx: Any, prefix: str, role: str, section: dict[str, Any]) -> None:
    """param_offload and grad_offload -> fsdp_config.param_offload (FSDP2's CPU offload moves a
    parameter's gradient with it); optimizer_offload -> fsdp_config.optimizer_offload."""
    keys = {k: f"{prefix}.megatron.{k}" for k in ("param_offload", "grad_offload", "optimizer_offload") if k in section}
    ctx.consume(*keys.values())
    param, grad = bool(section.get("param_offload")), bool(section.get("grad_offload"))
    if "param_offload" in keys:
        ctx.set(f"{role}.fsdp_config.param_offload", param or (grad and role != "ref"), keys["param_offload"],
                "true with grad_offload: FSDP2 offloads gradients with their parameters" if grad and not param and role != "ref" else "")
    if "grad_offload" in keys:
        if role == "ref":
            ctx.drop(keys["grad_offload"], "the reference computes no gradients")
        elif grad and "param_offload" not in keys:
            ctx.set(f"{role}.fsdp_config.param_offload", True, keys["grad_offload"], "FSDP2 offloads gradients with their parameters")
        else:
            ctx.drop(keys["grad_offload"], f"follows param_offload: FSDP2 offloads gradients with their parameters ({role}.fsdp_config.param_offload)")
    if "optimizer_offload" in keys:
        if role == "ref":
            ctx.drop(keys["optimizer_offload"], "the reference has no optimizer")
        else:
            ctx.set(f"{role}.fsdp_config.optimizer_offload", bool(section["optimizer_offload"]), keys["optimizer_offload"])


def _packing(ctx: Any, role: str, key: str, value: Any) -> None:
    """verl's Megatron workers pack sequences (thd) by megatron.use_remove_padding, posttrain by
    model.use_remove_padding (the policy's roles) and critic.model.use_remove_padding."""
    if role == "ref":
        ctx.drop(key, "posttrain's reference packs as the policy does (model.use_remove_padding)")
        return
    native = "model.use_remove_padding" if role == "actor" else "critic.model.use_remove_padding"
    ctx.set(native, value, key, "packed (thd) or padded (bshd) sequences: the same numbers, padding is masked out")


def _context_parallel(ctx: Any, prefix: str, role: str, key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        ctx.refuse(key, f"expected a whole number of devices >= 1, got {value!r}", None, value)
        return
    actor = ctx.get("actor_rollout_ref.actor.megatron.context_parallel_size", 1)
    if role == "ref" and value == actor:
        ctx.drop(key, "the actor's: posttrain's reference splits its sequences as the actor does (ref.ulysses_sequence_parallel_size null)")
        return
    ctx.set(f"{role}.ulysses_sequence_parallel_size", value, key, "context parallelism -> Ulysses sequence parallelism of that size (exact attention either way)")


def _seed(ctx: Any, prefix: str, key: str, value: Any) -> None:
    actor_key = "actor_rollout_ref.actor.megatron.seed"
    if prefix == "actor_rollout_ref.actor":
        ctx.set("trainer.seed", value, key, "verl seeds torch, numpy and random of the role's processes with it, as trainer.seed does")
    elif value == ctx.get(actor_key, 42):
        ctx.drop(key, "the actor's seed: posttrain seeds every role's processes with trainer.seed")
    else:
        ctx.refuse(key, f"posttrain seeds every role's processes with one seed (trainer.seed, from {actor_key}); give this role the actor's", None, value)


def _transformer(ctx: Any, prefix: str, role: str, key: str, name: str, value: Any) -> None:
    """One key of ``override_transformer_config`` (Megatron's TransformerConfig)."""
    if name == "" and value in ({}, None):
        ctx.drop(key, "empty: nothing overridden")
    elif name == "recompute_granularity":
        _recompute(ctx, role, key, value)
    elif name in _WHICH_RECOMPUTED:
        ctx.drop(key, "which layers or modules Megatron recomputes; posttrain recomputes whole decoder layers when recompute_granularity is set (gradient checkpointing): the same numbers")
    elif name in _KERNELS:
        ctx.drop(key, "a kernel or dispatch choice: the same computation to float rounding")
    elif name in _PIPELINE:
        ctx.drop(key, f"how layers split into pipeline stages, {_SAME}")
    elif name in _OTC_LAYOUT:
        ctx.drop(key, f"how Megatron splits sequences and optimizer state over its ranks, {_SAME}")
    elif name == "moe_router_dtype":
        ctx.drop(key, _ROUTER_DTYPE)
    elif name in ("moe_router_load_balancing_type", "moe_aux_loss_coeff"):
        _balancing(ctx, prefix, role, key, name, value)
    elif name == "moe_z_loss_coeff":
        _z_loss(ctx, role, key, value)
    elif name in ("moe_router_enable_expert_bias", "moe_router_bias_update_rate"):
        _expert_bias(ctx, prefix, role, key, name, value)
    elif name in _CHANGES:
        ctx.refuse(key, _CHANGES[name], None, value)
    else:
        ctx.refuse(key, f"an option of Megatron's TransformerConfig ({name}) that can change the model's computation; posttrain builds the "
                        "Hugging Face model from its config.json: set the model's own attribute with actor_rollout_ref.model.override_config", None, value)


def _balancing(ctx: Any, prefix: str, role: str, key: str, name: str, value: Any) -> None:
    """Megatron's MoE load-balancing loss: its type (verl sets none before applying the overrides)
    and coefficient (verl's converters hand Megatron the model's router_aux_loss_coef) -> the role's
    moe_aux_loss_coef (actor or critic), for type aux_loss; Megatron reads the coefficient only with that type."""
    otc = f"{prefix}.megatron.override_transformer_config"
    kind = ctx.get(f"{otc}.moe_router_load_balancing_type", "none")
    if role == "ref":
        ctx.drop(key, "the reference trains nothing: no loss to balance")
    elif kind in ("none", None):
        ctx.drop(key, "none: no balancing loss (verl's own setting), as actor.moe_aux_loss_coef 0" if name != "moe_aux_loss_coeff" else
                 f"{value!r}: Megatron weighs the load-balancing loss of the type moe_router_load_balancing_type names, which verl sets to none: no router loss, as actor.moe_aux_loss_coef 0")
    elif kind != "aux_loss":
        ctx.refuse(key, f"load-balancing type {kind!r}: posttrain's router loss is Megatron's aux_loss (each micro-batch's Switch loss, "
                        "actor.moe_aux_loss_coef); use aux_loss or none", None, value)
    elif name == "moe_router_load_balancing_type" and ctx.has(f"{otc}.moe_aux_loss_coeff"):
        ctx.drop(key, f"aux_loss: the Switch loss posttrain adds with {role}.moe_aux_loss_coef (from moe_aux_loss_coeff)")
    elif name == "moe_router_load_balancing_type":
        ctx.set(f"{role}.moe_aux_loss_coef", None, key, "aux_loss, weighed by the model's router_aux_loss_coef (what verl's converters hand Megatron): null reads it when the model loads")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        ctx.refuse(key, f"expected a number >= 0, got {value!r}", f"{role}.moe_aux_loss_coef", value)
    else:
        ctx.set(f"{role}.moe_aux_loss_coef", float(value), key, "Megatron adds it x each micro-batch's aux_loss (the Switch loss) to the loss")


def _z_loss(ctx: Any, role: str, key: str, value: Any) -> None:
    """Megatron's router z-loss weight (its routers add it in training whatever the load-balancing
    type) -> the role's moe_z_loss_coef."""
    if role == "ref":
        ctx.drop(key, "the reference trains nothing: no router loss")
    elif value is None:
        ctx.drop(key, "null: no router z-loss (Megatron's default), as moe_z_loss_coef 0")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        ctx.refuse(key, f"expected a number >= 0, got {value!r}", f"{role}.moe_z_loss_coef", value)
    else:
        ctx.set(f"{role}.moe_z_loss_coef", float(value), key, "Megatron adds it x each micro-batch's router z-loss (mean squared logsumexp of the router logits, summed over MoE layers) to the loss")


_BIAS_RATE = 1e-3  # Megatron's TransformerConfig.moe_router_bias_update_rate default


def _expert_bias(ctx: Any, prefix: str, role: str, key: str, name: str, value: Any) -> None:
    """Megatron's expert bias (DeepSeek-V3's auxiliary-loss-free balancing): a per-expert bias added
    to the router scores to choose the top-k experts, moved by ``moe_router_bias_update_rate``
    toward even loads after every optimizer step. At rate 0 it stays as the checkpoint gave it,
    which is how the Hugging Face model routes (its e_score_correction_bias, where the family has
    one, is a buffer no optimizer moves; without one the bias is 0), so both keys change nothing.
    A positive rate is a balancing posttrain does not do."""
    otc = f"{prefix}.megatron.override_transformer_config"
    enabled = ctx.get(f"{otc}.moe_router_enable_expert_bias", False)
    rate = ctx.get(f"{otc}.moe_router_bias_update_rate", _BIAS_RATE)
    if enabled is not True:
        if name == "moe_router_bias_update_rate":
            ctx.drop(key, f"read only with moe_router_enable_expert_bias true (here {enabled!r})")
        else:
            ctx.drop(key, f"{value!r}: Megatron's default, no expert bias of its own; posttrain routes as the Hugging Face model does")
    elif role == "ref":
        ctx.drop(key, "the reference takes no optimizer step, so its expert bias stays as loaded: the Hugging Face model's routing")
    elif isinstance(rate, bool) or not isinstance(rate, (int, float)):
        ctx.refuse(key, f"moe_router_bias_update_rate: expected a number, got {rate!r}", None, value)
    elif rate == 0:
        ctx.drop(key, "expert bias with update rate 0: the bias stays as the checkpoint gave it, the Hugging Face model's own routing "
                      "(its e_score_correction_bias buffer, which no optimizer moves; 0 where the family has none)")
    else:
        ctx.refuse(key, f"the expert bias updated by {rate} after each step toward even expert loads (auxiliary-loss-free balancing, "
                        "Megatron's default rate 1e-3): posttrain keeps the model's bias as loaded; set "
                        f"{otc}.moe_router_bias_update_rate=0 for that, or balance with actor.moe_aux_loss_coef", None, value)


def _recompute(ctx: Any, role: str, key: str, value: Any) -> None:
    if value is None:
        ctx.drop(key, "null: no recomputation")
    elif value not in ("full", "selective"):
        ctx.refuse(key, f"{value!r} is not one of Megatron's full, selective", None, value)
    elif role == "ref":
        ctx.drop(key, "the reference computes no gradients: nothing to recompute")
    else:
        ctx.set(GRADIENT_CHECKPOINTING[role], True, key, f"{value}: recompute activations in the backward pass (gradient checkpointing of every decoder layer)")


def optimizers(ctx: Any) -> None:
    """The actor's and critic's ``optim`` under verl's Megatron workers: Megatron's optimizer."""
    for prefix, role in (("actor_rollout_ref.actor", "actor"), ("critic", "critic")):
        if not is_megatron(ctx, prefix):
            continue
        name_key, betas_key, extra_key = (f"{prefix}.optim.{k}" for k in ("optimizer", "betas", "override_optimizer_config"))
        name = ctx.get(name_key, "adam")
        if ctx.has(name_key):
            ctx.consume(name_key)
            if name not in ("adam", "sgd"):
                ctx.refuse(name_key, f"{name!r} is not one of Megatron's optimizers (adam, sgd)", None, name)
                continue
            ctx.set(f"{role}.optim.optimizer", "adamw" if name == "adam" else "sgd", name_key, _ADAM if name == "adam" else "Megatron's sgd (momentum 0.9 unless override_optimizer_config's sgd_momentum)")
            ctx.set(f"{role}.optim.decay_bias_and_norm", False, name_key, "Megatron gives biases and one-dimensional parameters no weight decay")
            if name == "sgd":
                ctx.set(f"{role}.optim.override_optimizer_config", {"momentum": (ctx.get(extra_key) or {}).get("sgd_momentum", 0.9)}, name_key, "Megatron's sgd_momentum")
        if ctx.has(betas_key):
            ctx.consume(betas_key)
            ctx.drop(betas_key, "not read by verl's Megatron optimizer: Megatron's adam_beta1/adam_beta2 apply (0.9, 0.999 unless override_optimizer_config sets them)")
        if ctx.has(extra_key):
            ctx.consume(extra_key)
            _megatron_optimizer_options(ctx, role, extra_key, ctx.get(extra_key) or {}, name)


def min_lr(ctx: Any) -> None:
    """Megatron's scheduler decays from lr to an absolute ``min_lr`` (cosine and linear alike:
    min_lr + (lr - min_lr) x the decay's coefficient): posttrain's min_lr_ratio = min_lr / lr. verl's
    FSDP optimizer has no such key."""
    for prefix, role in (("actor_rollout_ref.actor", "actor"), ("critic", "critic")):
        key = f"{prefix}.optim.min_lr"
        if not ctx.has(key):
            continue
        ctx.consume(key)
        value, lr = ctx.get(key), value_of(ctx, f"{prefix}.optim.lr")
        style = value_of(ctx, f"{prefix}.optim.lr_decay_style")
        if not is_megatron(ctx, prefix):
            ctx.refuse_unless_default(key, "Megatron's absolute floor of the decay; verl's FSDP optimizer has no min_lr: give "
                                           "optim.min_lr_ratio (the floor as a fraction of lr)", f"{role}.optim.min_lr_ratio", value)
        elif not value or style not in ("cosine", "linear"):
            ctx.drop(key, f"{value!r}: " + ("the decay ends at 0, as min_lr_ratio's default" if not value else
                                            f"not read by Megatron's {style} schedule, which does not decay to it"))
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(lr, (int, float)) or not 0 < value <= lr:
            ctx.refuse(key, f"expected a floor in [0, lr] (lr {lr!r}), got {value!r}", f"{role}.optim.min_lr_ratio", value)
        else:
            ctx.set(f"{role}.optim.min_lr_ratio", value / lr, key, f"Megatron's {style} decay ends at min_lr: the floor as a fraction of lr ({value} / {lr})")


def _megatron_optimizer_options(ctx: Any, role: str, key: str, options: dict[str, Any], name: str) -> None:
    """override_optimizer_config under Megatron holds Megatron's OptimizerConfig fields."""
    if not options:
        ctx.drop(key, "empty: nothing overridden")
        return
    betas = [options.get("adam_beta1", 0.9), options.get("adam_beta2", 0.999)]
    for option, value in options.items():
        sub = f"{key}.{option}"
        if option in ("adam_beta1", "adam_beta2"):
            ctx.set(f"{role}.optim.betas", betas, sub, "Megatron's Adam betas")
        elif option == "adam_eps":
            ctx.set(f"{role}.optim.eps", value, sub, "Megatron's Adam epsilon")
        elif option == "sgd_momentum" and name == "sgd":
            ctx.drop(sub, "read with optim.optimizer sgd (override_optimizer_config.momentum)")
        elif option in _OPT_PLACEMENT:
            ctx.drop(sub, "where Megatron runs the optimizer step (CPU or device): the same update; posttrain offloads with the role's fsdp_config.optimizer_offload")
        elif option == "use_precision_aware_optimizer" and not {"main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"} & set(options):
            ctx.drop(sub, "with Megatron's default dtypes (fp32 master weights, gradients and moments) the same update, as posttrain's fp32 optimizer state")
        else:
            ctx.refuse(sub, f"an option of Megatron's optimizer ({option}) that posttrain's torch optimizers have no counterpart of", None, value)


_LOAD_WEIGHT = ("actor_rollout_ref.actor.load_weight", "actor_rollout_ref.ref.load_weight", "critic.load_weight", "reward_model.load_weight")
_TIMEOUTS = ("critic.nccl_timeout", "reward_model.nccl_timeout")
_LAYER_NAMES = "actor_rollout_ref.rollout.layer_name_map"


def other_keys(ctx: Any) -> None:
    """The Megatron tree's other keys: ``load_weight`` (declared by verl's config classes, read
    nowhere), the critic's and reward model's process-group timeouts (posttrain's roles share one
    set of processes: cluster.rpc_timeout_s), and the names of Megatron's fused layers that verl's
    weight sync to the engine maps (posttrain's engine gets Hugging Face weights by name)."""
    for key in _LOAD_WEIGHT:
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, "declared by verl's config classes but read nowhere in verl: the weights always load")
    for key in _TIMEOUTS:
        if ctx.has(key):
            ctx.consume(key)
            ctx.set("cluster.rpc_timeout_s", ctx.get(key), key, "the role's process-group timeout; posttrain's roles share its processes")
    if ctx.has(_LAYER_NAMES):
        ctx.consume(_LAYER_NAMES)
        ctx.drop(_LAYER_NAMES, "names of Megatron's fused layers for verl's weight sync to the engine; posttrain's engine takes Hugging Face weights by name")


_RR = "actor_rollout_ref.actor.router_replay"
_R3 = ("R3 replays the routing the rollout engine recorded while generating; posttrain's engines record no routing "
       "(R2, recorded in the actor's old-log-prob forward, is actor.router_replay.mode R2)")


def _router_replay(ctx: Any, key: str, name: str, value: Any, read: bool = True) -> None:
    """One key of the actor's routing replay: 0.8's ``actor.router_replay`` (``read``: verl's Megatron
    actor reads its mode, its FSDP actor does not) or 0.10's ``actor.megatron.router_replay`` (the
    engine's: always read). ``record_file`` and ``replay_file`` are declared by verl's
    RouterReplayConfig but read nowhere (the routes travel with the batch)."""
    if name in ("record_file", "replay_file"):
        ctx.drop(key, "declared by verl's RouterReplayConfig but read nowhere in verl: the recorded routes travel with the batch")
    elif name != "mode":
        ctx.refuse(key, "not a key of verl's RouterReplayConfig (mode, record_file, replay_file)", None, value)
    elif value == "disabled":
        ctx.drop(key, "disabled: every token routed by the model's own router (actor.router_replay.mode's default)")
    elif value == "R3":
        ctx.refuse(key, _R3, "actor.router_replay.mode", value)
    elif value == "R2" and read:
        ctx.set("actor.router_replay.mode", "R2", key, "the old-log-prob forward records every token's experts and the update's forwards replay them")
    elif value == "R2":
        ctx.drop(key, "R2 is read by verl's Megatron actor only: its FSDP actor (strategy fsdp/fsdp2) routes every token with the "
                      "model's own router, as posttrain does here; posttrain's own actor.router_replay.mode R2 replays under FSDP too")
    else:
        ctx.refuse(key, "verl's modes are disabled, R2 and R3", "actor.router_replay.mode", value)


def router_replay(ctx: Any) -> None:
    """The actor's ``router_replay`` (`_router_replay`): R2 -> actor.router_replay.mode R2; R3 refused."""
    for name in ("record_file", "replay_file", "mode"):
        key = f"{_RR}.{name}"
        if ctx.has(key):
            ctx.consume(key)
            _router_replay(ctx, key, name, ctx.get(key), read=is_megatron(ctx, "actor_rollout_ref.actor"))


HANDLERS = [strategies, megatron, optimizers, min_lr, other_keys, router_replay]


def _rules() -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for prefix, role in ROLES.items():
        m = f"{prefix}.megatron."
        out[f"{prefix}.strategy"] = Rule(f"{role}.strategy", "fsdp or fsdp2: posttrain's FSDP2; megatron (verl's Megatron workers) or veomni (verl 0.10's VeOmni engine): dropped, the role's megatron or veomni keys translate onto FSDP2; fsdp_turbo (verl 0.10's FSDP-Turbo, on FSDP2): fsdp2, its turbo_config translated", "fsdp2")
        for name, how in LAYOUT.items():
            out[m + name] = Rule(None, how, 2 if name.endswith("size") else True)
        out[m + "use_remove_padding"] = (Rule(None, "posttrain's reference packs as the policy does", True) if role == "ref" else
                                         Rule("model.use_remove_padding" if role == "actor" else "critic.model.use_remove_padding", "packed (thd) or padded (bshd) sequences", True))
        out[m + "context_parallel_size"] = Rule(f"{role}.ulysses_sequence_parallel_size", "Megatron's context parallelism -> Ulysses sequence parallelism of that size (exact attention either way); the reference's follows the actor's", 2)
        out[m + "seed"] = Rule("trainer.seed" if role == "actor" else None, "the seed of the role's processes: trainer.seed" if role == "actor" else "dropped when it is the actor's seed (posttrain seeds every role with trainer.seed), else refused", 7 if role == "actor" else 42)
        out[m + "dtype"] = Rule(None, "bfloat16: bf16 compute with fp32 master weights, what posttrain's mixed precision does on a GPU; float16 is refused (loss scaling)", "bfloat16")
        out[m + "param_offload"] = Rule(f"{role}.fsdp_config.param_offload", "CPU offload of the role's parameters (FSDP2)", True)
        out[m + "override_ddp_config"] = Rule(None, f"Megatron DDP's buckets and communication overlap, {_SAME}; other DDP options are refused", {"overlap_grad_reduce": True})
        out[m + "override_mcore_model_config"] = Rule(None, "empty: nothing; any entry is refused (posttrain builds the Hugging Face model from its config.json)", {})
        if role == "ref":
            out[m + "grad_offload"] = Rule(None, "the reference computes no gradients", True)
            out[m + "optimizer_offload"] = Rule(None, "the reference has no optimizer", True)
            out[m + "override_transformer_config"] = Rule(None, "as the actor's; recompute_granularity: nothing to recompute without gradients", {"recompute_granularity": "full"})
        else:
            out[m + "grad_offload"] = Rule(f"{role}.fsdp_config.param_offload", "FSDP2 offloads gradients with their parameters: true sets param_offload", True)
            out[m + "optimizer_offload"] = Rule(f"{role}.fsdp_config.optimizer_offload", "CPU offload of the role's optimizer state (FSDP2)", True)
            out[m + "override_transformer_config"] = Rule(GRADIENT_CHECKPOINTING[role], "Megatron's TransformerConfig: recompute_granularity full/selective -> gradient checkpointing; recompute_method/num_layers/modules, kernels, fusions, dispatchers, pipeline splits and moe_router_dtype dropped (same numbers to rounding); moe_router_load_balancing_type aux_loss -> the role's moe_aux_loss_coef (moe_aux_loss_coeff, else null: the model's router_aux_loss_coef; under verl's type none the coefficient is dropped, other types refused); moe_z_loss_coeff -> the role's moe_z_loss_coef; moe_router_enable_expert_bias with moe_router_bias_update_rate 0 dropped (the bias stays as loaded: the model's own routing), a positive rate refused; dropout, MoE capacity and other options refused", {"recompute_granularity": "full"})
    out.update({key: Rule(None, "declared by verl's config classes but read nowhere in verl", False) for key in _LOAD_WEIGHT})
    out.update({key: Rule("cluster.rpc_timeout_s", "the role's process-group timeout (seconds); posttrain's roles share one set of processes", 1200) for key in _TIMEOUTS})
    out["actor_rollout_ref.actor.megatron.router_replay.mode"] = Rule("actor.router_replay.mode", "verl 0.10's engine-level routing replay, the same modes as actor_rollout_ref.actor.router_replay.mode: R2 -> R2, R3 refused", "R2", (("actor_rollout_ref.actor.strategy", "megatron"),))
    out[_RR + ".mode"] = Rule("actor.router_replay.mode", "R2 (verl's Megatron actor) -> R2: experts recorded in the old-log-prob forward, replayed in the update; under verl's FSDP actor, which does not read it, dropped; R3 (the engine's routing) refused", "R2", (("actor_rollout_ref.actor.strategy", "megatron"),))
    out.update({f"{_RR}.{name}": Rule(None, "declared by verl's RouterReplayConfig but read nowhere in verl", "/tmp/routes.pt") for name in ("record_file", "replay_file")})
    for prefix, role in (("actor_rollout_ref.actor", "actor"), ("critic", "critic")):
        o = f"{prefix}.optim."
        out[o + "min_lr"] = Rule(f"{role}.optim.min_lr_ratio", "Megatron's absolute floor of a cosine or linear decay: min_lr_ratio = min_lr / lr; "
                                 "dropped with a constant schedule; refused beside verl's FSDP optimizer, which has no min_lr", 1e-7,
                                 ((f"{prefix}.strategy", "megatron"), (o + "lr_decay_style", "cosine"), (o + "lr", 1e-6)))
    out[_LAYER_NAMES] = Rule(None, "names of Megatron's fused layers for verl's weight sync to the engine; posttrain's engine takes Hugging Face weights by name", {"qkv_layer_name": "qkv"})
    return out


RULES: dict[str, Rule] = _rules()
