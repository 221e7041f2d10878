"""Building the RL roles from a stage's config: everything heavy is made here, once.

Kept apart from the step so that `rl.py` reads as the algorithm; this module is the wiring.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from posttrain.config.access import device_lists, reference_crew_devices, rollout_placement
from posttrain.config.checks import role_needs
from posttrain.config.derive import Derived
from posttrain.config.schema import Config
from posttrain.errors import ConfigError
from posttrain.models.kernels import head_kernel
from posttrain.models.vision import freeze_vision_tower
from posttrain.models.loading import causal_lm_from_config, load_tokenizer, load_value_model, resolve_dtype
from posttrain.models.freeze import freeze_by_prefix
from posttrain.models.lora import add_lora, lora_settings, value_head_name
from posttrain.models.moe import router_loss_settings, router_z_setting
from posttrain.models.router_replay import replay_routers
from posttrain.models.precision import compute_dtype
from posttrain.optim import build_optimization
from posttrain.cluster.weight_sync import WeightSync, weight_sync_for
from posttrain.cluster.world import World, role_parallelism
from posttrain.rollout.base import RolloutEngine
from posttrain.rollout.engines import build_engine, check_engine_deadline
from posttrain.workers import Actor, ActorSettings, Critic, CriticSettings, ReferencePolicy
from posttrain.workers.rollout import RolloutWorker
from posttrain.trainer.reference_crew import CrewModel, ReferenceCrewClient
from posttrain.trainer.rl_settings import (
    forward_batching, loss_inputs, loss_options, micro_batch_budget, policy_temperature, response_length, rollout_seed, topk_kl_settings,
)


def engine_precision(policy: nn.Module, actor_compute: str, rollout_dtype: str) -> tuple[torch.dtype, bool]:
    """The rollout engine's weight dtype (`rollout.dtype`; auto = the actor's compute dtype) and
    whether the engine then computes exactly as the actor does (same dtype, no autocast), which is
    when reusing its log-probs as the old log-probs can be exact."""
    params = next(policy.parameters()).dtype
    actor_dtype = resolve_dtype(actor_compute) if actor_compute != "fp32" else params
    engine = actor_dtype if rollout_dtype == "auto" else resolve_dtype(rollout_dtype)
    return engine, engine == params == actor_dtype


def check_critic_tokenizer(cfg: Config, tokenizer: Any) -> None:
    """The critic reads the policy's token ids: its own tokenizer, if set, must have the same vocabulary."""
    path = cfg.critic.model.tokenizer_path
    if path is None:
        return
    theirs = load_tokenizer(path)
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(
            f"critic.model.tokenizer_path {path!r}: its vocabulary differs from the policy's "
            f"tokenizer ({len(theirs)} vs {len(tokenizer)} tokens); the critic reads the policy's token ids, so "
            "leave tokenizer_path null or give a tokenizer with the same vocabulary"
        )


def check_teacher_tokenizer(cfg: Config, tokenizer: Any, path: str | None = None, key: str = "ref.model_path") -> None:
    """A teacher (`ref.model_path`, or `path` at `key`) scores the policy's token ids: its tokenizer must have the same vocabulary."""
    path = path or cfg.ref.model_path
    theirs = load_tokenizer(path)
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(
            f"{key} {path!r}: its vocabulary differs from the policy's tokenizer ({len(theirs)} vs "
            f"{len(tokenizer)} tokens); a teacher scores the policy's token ids, so it needs the same tokenizer"
        )


def teacher_from_config(cfg: Config, tokenizer: Any, device: torch.device | str = "cpu", path: str | None = None,
                        key: str = "ref.model_path") -> nn.Module:
    """The reference role's model when `ref.model_path` names a teacher (or the teacher at `path`,
    config key `key`): loaded with the policy's model options, frozen (its vocabulary checked by
    `check_teacher_tokenizer`)."""
    path = path or cfg.ref.model_path
    check_teacher_tokenizer(cfg, tokenizer, path, key)
    model = causal_lm_from_config(dataclasses.replace(cfg.model, path=path, enable_gradient_checkpointing=False), device=device)
    return model.eval().requires_grad_(False)


def critic_model_from_config(cfg: Config, tokenizer: Any, device: torch.device | str = "cpu") -> nn.Module:
    """The critic's value model from `critic.model`: its own directory, dtype, config overrides and
    loading options, or the policy's (model.path, model.dtype, model.trust_remote_code) where null;
    with `critic.model.lora_rank` its LoRA adapter in it."""
    m = cfg.critic.model
    check_critic_tokenizer(cfg, tokenizer)
    model = load_value_model(
        m.path or cfg.model.path, dtype=cfg.model.dtype if m.dtype == "auto" else m.dtype,
        trust_remote_code=m.trust_remote_code or (m.path is None and cfg.model.trust_remote_code),
        override_config=dict(m.override_config), gradient_checkpointing=m.enable_gradient_checkpointing,
        external_lib=m.external_lib, device=device,
    )
    lora = lora_settings(m, "critic.model")
    if lora is not None:  # adapters on the body; the new value head is trained whole (posttrain.models.lora)
        add_lora(model, lora, m.path or cfg.model.path, task="TOKEN_CLS", train_whole=(value_head_name(model),))
    return model


@dataclass
class RLRoles:
    """The roles of one RL stage, as the trainer sees them."""

    rollout: RolloutWorker | None  # None in a decoupled run's trainer
    actor: Actor | None  # None (with reference, critic and sync) in a decoupled run's explorer
    reference: ReferencePolicy | ReferenceCrewClient | None  # the client of a reference crew of its own
    critic: Critic | None
    sync: WeightSync | None  # actor -> rollout engine, after every update
    teachers: dict[str, ReferencePolicy | CrewModel] = field(default_factory=dict)  # ref.teachers, by name (learner only)

    def close(self) -> None:
        """Release what the roles hold beyond this process: a reference crew is told to stop."""
        client = self.reference if isinstance(self.reference, ReferenceCrewClient) else next(
            (t.client for t in self.teachers.values() if isinstance(t, CrewModel)), None)
        if client is not None:
            client.close()

    @property
    def engine(self) -> RolloutEngine | None:
        """The rollout role's engine (this process's)."""
        return self.rollout.engine if self.rollout is not None else None


def reference_policy(cfg: Config, model: nn.Module, dp, adapters_off=None) -> ReferencePolicy:
    """The frozen reference over `model` (sharded already) with the ref.* micro-batching, on this
    process's data-parallel share `dp`; `adapters_off`: the actor's LoRA model's adapters switch."""
    a = cfg.actor
    size, max_tokens = forward_batching(
        cfg.ref.log_prob_micro_batch_size_per_gpu, cfg.ref.log_prob_use_dynamic_bsz, cfg.ref.log_prob_max_token_len_per_gpu,
        default_dynamic=a.use_dynamic_bsz, default_budget=a.ppo_max_token_len_per_gpu,
        sp=cfg.ref.ulysses_sequence_parallel_size or a.ulysses_sequence_parallel_size,
    )
    return ReferencePolicy(
        model, temperature=policy_temperature(cfg), micro_batch_size=size, max_tokens=max_tokens,
        compute_dtype=cfg.ref.fsdp_config.mixed_precision.param_dtype, pack=cfg.model.use_remove_padding,
        lean_forward="compiled" if a.use_torch_compile else "off", dp=dp, adapters_off=adapters_off, head=head_kernel(cfg.model),
    )


def crew_reference(cfg: Config, tokenizer: Any, world: World) -> dict[str, ReferencePolicy]:
    """The models a crew process holds (posttrain.trainer.reference_crew), by request name: what
    `build_roles` makes on the trainer workers, built on the crew's world instead. "": the reference,
    when the stage needs one: the stage's starting model from model.path (with LoRA, the base the
    adapters start from: what the actor's model with its adapters off computes) or ref.model_path's
    teacher; and each of ref.teachers by its name. Each sharded over the crew (ref.fsdp_config)."""
    sp = cfg.ref.ulysses_sequence_parallel_size or cfg.actor.ulysses_sequence_parallel_size
    parallel = role_parallelism(world, cfg.trainer.balance_batch)
    models = {}
    if role_needs(cfg).reference:
        models[""] = (teacher_from_config(cfg, tokenizer, world.torch_device) if cfg.ref.model_path is not None
                      else causal_lm_from_config(cfg.model, device=world.torch_device))
    for name, t in cfg.ref.teachers.items():
        models[name] = teacher_from_config(cfg, tokenizer, world.torch_device, t.model_path, f"ref.teachers.{name}.model_path")
    return {name: reference_policy(cfg, world.shard(model, cfg.ref.fsdp_config), parallel(model, "ref", sp)) for name, model in models.items()}


def make_engine(cfg: Config, model: nn.Module, tokenizer: Any, owns_weights: bool = False) -> RolloutEngine:
    """The rollout engine `rollout.name` names, over `model`'s weights (`posttrain.rollout.engines`);
    `owns_weights`: `model` is the engine's own copy, which it may move while asleep."""
    check_engine_deadline(cfg)
    return build_engine(cfg, model, tokenizer, seed=rollout_seed(cfg), owns_weights=owns_weights)


def build_roles(cfg: Config, derived: Derived, tokenizer: Any, world: World = World(), halves: str = "both",
                run_dir: Path | None = None) -> RLRoles:
    """Every role of the stage on this worker process. With several workers each role's model is
    sharded over all of them (FSDP2, its own `fsdp_config`) and the engine holds a whole copy of the
    policy, made before the actor's is sharded (verl's hybrid engine: all roles on every device).
    `halves`: "both", or one half of a decoupled run (`posttrain.trainer.decoupled`): "explorer"
    (the engine alone, fed published weights) or "learner" (actor, reference, critic; no engine).
    With a reference crew (cluster.device_mapping.ref on devices of its own) the reference role is
    its client, which opens its channel in `run_dir` (the stage's directory)."""
    total = derived.total_training_steps or 1
    seed = cfg.trainer.seed
    dp = world.data_parallel(cfg.trainer.balance_batch)
    if cfg.rollout.name == "external":  # the policy is served elsewhere: no local weights to load (bench only)
        engine = build_engine(cfg, None, tokenizer, seed=rollout_seed(cfg))
        return RLRoles(rollout=RolloutWorker(engine, dp, free_cache=False, tokenizer=tokenizer), actor=None, reference=None, critic=None, sync=None)
    policy = causal_lm_from_config(cfg.model, device=world.torch_device)
    a = cfg.actor
    n = cfg.rollout.n
    actor_compute = compute_dtype(a.fsdp_config.mixed_precision.param_dtype, world.torch_device)  # auto: bf16 on a GPU
    lean = "compiled" if a.use_torch_compile else "off"  # one switch for the actor, reference and critic forwards
    actor_budget = dict(default_dynamic=a.use_dynamic_bsz, default_budget=a.ppo_max_token_len_per_gpu)
    actor_sp = a.ulysses_sequence_parallel_size
    engine_dtype, same_numerics = engine_precision(policy, actor_compute, cfg.rollout.dtype)
    if halves == "explorer":
        engine = make_engine(cfg, policy.eval().requires_grad_(False).to(engine_dtype), tokenizer, owns_weights=True)
        rollout = RolloutWorker(engine, dp, free_cache=cfg.rollout.free_cache_engine, tokenizer=tokenizer)
        return RLRoles(rollout=rollout, actor=None, reference=None, critic=None, sync=None)
    lora = lora_settings(cfg.model, "model")
    # Copies of the unsharded policy first: the engine's (when it keeps its own) and the reference's.
    # With LoRA the engine keeps a plain copy to merge into, and the reference is the actor's own
    # model with its adapters off (posttrain.models.lora): no copy.
    own_copy = halves == "both" and (world.distributed or lora is not None or engine_dtype != next(policy.parameters()).dtype)
    engine_model = copy.deepcopy(policy) if own_copy else policy
    needs = role_needs(cfg)  # from the estimator's registry entry and the KL switches
    teacher = cfg.ref.model_path is not None  # the reference is another model (on-policy distillation)
    ref_model = None
    # cluster.device_mapping.ref apart from the actor's (or on some of its devices): the reference and teachers live in a crew
    crew = (needs.reference or bool(cfg.ref.teachers)) and reference_crew_devices(cfg) is not None
    if needs.reference and not crew:
        ref_model = teacher_from_config(cfg, tokenizer, world.torch_device) if teacher else copy.deepcopy(policy) if lora is None else None
    adapters = add_lora(policy, lora, cfg.model.path) if lora is not None else None
    freeze_by_prefix(policy, a.freeze_module_prefix)  # before sharding: the optimizer takes what still trains
    if a.freeze_vision_tower:
        freeze_vision_tower(policy)
    moe_coef, moe_top_k = router_loss_settings(policy, a.moe_aux_loss_coef)  # null: the model's
    moe_z = router_z_setting(policy, a.moe_z_loss_coef)
    if a.router_replay.mode == "R2":
        replay_routers(policy)  # a dense model or an unknown router family: refused here, naming the key
    train_dp = role_parallelism(world, cfg.trainer.balance_batch)
    actor_dp = train_dp(policy, "actor", a.ulysses_sequence_parallel_size)
    trained = world.shard(policy, a.fsdp_config)
    optimizer, scheduler = build_optimization(
        trained.named_parameters(), a.optim, warmup_steps=derived.actor_warmup_steps or 0, total_steps=derived.actor_schedule_steps or total
    )
    actor = Actor(
        trained,
        optimizer,
        scheduler,
        ActorSettings(
            temperature=policy_temperature(cfg),
            loss_mode=a.policy_loss.loss_mode,
            loss_options=loss_options(cfg),
            difficulty_loss_weight=cfg.algorithm.difficulty_loss_weight,
            length_loss_weight=cfg.algorithm.length_loss_weight,
            loss_agg_mode=a.loss_agg_mode,
            loss_scale_factor=float(response_length(cfg)) if a.loss_agg_mode == "seq-mean-token-sum-norm" else None,
            entropy_coeff=a.entropy_coeff,
            use_kl_loss=a.use_kl_loss,
            kl_loss_coef=a.kl_loss_coef,
            rl_loss_coef=a.rl_loss_coef,
            sft_loss_coef=a.sft_loss_coef,
            topr_coefs=(a.topr_positive_loss_coef, a.topr_negative_loss_coef),
            kl_loss_type=a.kl_loss_type,
            ppo_epochs=a.ppo_epochs,
            schedule_per_update=a.optim.lr_schedule_unit == "update",
            mini_batch_size=a.ppo_mini_batch_size * n,
            micro_batch_size=a.ppo_micro_batch_size_per_gpu,
            max_tokens_per_micro_batch=micro_batch_budget(a.ppo_max_token_len_per_gpu, actor_sp) if a.use_dynamic_bsz else None,
            by_rows=a.micro_batch_weight == "rows",
            balanced=a.dynamic_bsz_partition == "balanced",
            topk_kl=topk_kl_settings(a.topk_kl),
            grad_clip=a.grad_clip,
            shuffle=a.shuffle,
            seed=seed,
            # auto: only when the engine computes as the actor does (checked again on the first batch)
            reuse_rollout_logprobs=(a.reuse_rollout_logprobs == "auto" and same_numerics) or a.reuse_rollout_logprobs == "always",
            force_reuse=a.reuse_rollout_logprobs == "always",
            share_prompt=a.share_prompt_forward,
            compute_dtype=actor_compute,
            pack=cfg.model.use_remove_padding,
            lean_forward=lean,
            head=head_kernel(cfg.model, a.entropy_checkpointing),
            activation_offload=cfg.model.enable_activation_offload,
            moe_aux_loss_coef=moe_coef,
            moe_top_k=moe_top_k,
            moe_z_loss_coef=moe_z,
            router_replay=a.router_replay.mode == "R2",
            loss_inputs=loss_inputs(cfg),
            logprob_batching=forward_batching(
                cfg.rollout.log_prob_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu,
                cfg.rollout.log_prob_use_dynamic_bsz, cfg.rollout.log_prob_max_token_len_per_gpu, **actor_budget, sp=actor_sp,
            ),
        ),
        dp=actor_dp,
    )
    # In one process and the actor's dtype the engine shares the actor's module: a copy would only
    # cost memory and a per-step state-dict copy. In another dtype (rollout.dtype), or when the
    # actor is sharded, it holds its own whole copy, refreshed by the weight sync. The version check
    # catches a missed sync either way. A decoupled run's learner has no engine.
    rollout, sync = None, None
    if halves == "both":
        if own_copy:
            engine_model.eval().requires_grad_(False).to(engine_dtype)
        engine = make_engine(cfg, engine_model, tokenizer, owns_weights=own_copy)
        sync = weight_sync_for(engine, actor.model, sharded=world.distributed, adapters=adapters is not None)
        # cluster.device_mapping.rollout on the first m workers: only those generate
        engines = len(device_lists(cfg)["rollout"]) if rollout_placement(cfg) == "subset" else None
        rollout = RolloutWorker(engine, dp, free_cache=cfg.rollout.free_cache_engine, tokenizer=tokenizer, engines=engines)
    reference = client = None
    if crew:  # the reference (and the teachers) run in processes of its own: the step's requests go to them
        client = ReferenceCrewClient(run_dir or Path(cfg.trainer.default_local_dir), world, cfg.cluster.rpc_timeout_s)
        reference = client if needs.reference else None
    elif needs.reference:
        reference = reference_policy(
            cfg, trained if ref_model is None else world.shard(ref_model, cfg.ref.fsdp_config),
            train_dp(policy if ref_model is None else ref_model, "ref", cfg.ref.ulysses_sequence_parallel_size or actor_sp),
            adapters_off=adapters.disable_adapter if ref_model is None else None,
        )
    if crew:  # the crew holds them: each teacher role asks the one client by name
        teachers = {name: CrewModel(client, name) for name in cfg.ref.teachers}
    else:  # frozen like the reference, each on every trainer worker
        teachers = {}
        for name, t in cfg.ref.teachers.items():
            model = teacher_from_config(cfg, tokenizer, world.torch_device, t.model_path, f"ref.teachers.{name}.model_path")
            teachers[name] = reference_policy(
                cfg, world.shard(model, cfg.ref.fsdp_config), train_dp(model, "ref", cfg.ref.ulysses_sequence_parallel_size or actor_sp))
    critic = None
    if needs.critic:
        c = cfg.critic
        torch.manual_seed(seed)  # the value head is initialised from the global RNG (alike on every rank)
        value_model = critic_model_from_config(cfg, tokenizer, world.torch_device)
        critic_dp = train_dp(value_model, "critic", c.ulysses_sequence_parallel_size)
        critic_moe = router_loss_settings(value_model, c.moe_aux_loss_coef, "critic.moe_aux_loss_coef")  # (coef, top-k)
        critic_z = router_z_setting(value_model, c.moe_z_loss_coef, "critic.moe_z_loss_coef")
        value_model = world.shard(value_model, c.fsdp_config)
        c_opt, c_sched = build_optimization(
            value_model.named_parameters(), c.optim, warmup_steps=derived.critic_warmup_steps or 0,
            total_steps=derived.critic_schedule_steps or total,
        )
        critic = Critic(
            value_model,
            c_opt,
            c_sched,
            CriticSettings(
                ppo_epochs=c.ppo_epochs,
                schedule_per_update=c.optim.lr_schedule_unit == "update",
                mini_batch_size=c.ppo_mini_batch_size * n,
                micro_batch_size=c.ppo_micro_batch_size_per_gpu,
                cliprange_value=c.cliprange_value,
                grad_clip=c.grad_clip,
                seed=seed,
                compute_dtype=c.fsdp_config.mixed_precision.param_dtype,
                loss_agg_mode=c.loss_agg_mode,
                by_rows=c.micro_batch_weight == "rows",
                balanced=c.dynamic_bsz_partition == "balanced",
                pack=c.model.use_remove_padding,
                lean_forward=lean,
                activation_offload=c.model.enable_activation_offload,
                moe_aux_loss_coef=critic_moe[0],
                moe_top_k=critic_moe[1],
                moe_z_loss_coef=critic_z,
                loss_scale_factor=float(response_length(cfg)) if c.loss_agg_mode == "seq-mean-token-sum-norm" else None,
                shuffle=a.shuffle if c.shuffle is None else c.shuffle,
                max_tokens_per_micro_batch=micro_batch_budget(c.ppo_max_token_len_per_gpu, c.ulysses_sequence_parallel_size) if c.use_dynamic_bsz else None,
                forward_batching=forward_batching(
                    c.forward_micro_batch_size_per_gpu or c.ppo_micro_batch_size_per_gpu, c.use_dynamic_bsz,
                    c.forward_max_token_len_per_gpu, default_dynamic=c.use_dynamic_bsz, default_budget=c.ppo_max_token_len_per_gpu,
                    sp=c.ulysses_sequence_parallel_size,
                ),
            ),
            dp=critic_dp,
        )
    return RLRoles(rollout=rollout, actor=actor, reference=reference, critic=critic, sync=sync, teachers=teachers)
