"""The worker-role sections of the schema: rollout, actor, ref, critic (and their optim).

Checks the declarations themselves (docs, refs, defaults within bounds) and that every parameter the
reference guides describe for these roles has a home: a field naming it in `refs`, or an entry in
the section module's `UNSUPPORTED` (or `NEGATED_REFS`) with a reason.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from posttrain.config import ConfigError, load_config, validate
from posttrain.config.fields import FRAMEWORKS, iter_fields, section_class, section_fields
from posttrain.config.mapping import mapping_rows
from posttrain.config.schema import Config

ROLES = ("rollout", "actor", "ref", "critic")
MODULES = [importlib.import_module(f"posttrain.config.sections.{m}") for m in ("rollout", "actor", "optim", "ref", "critic")]


def _worker_fields():
    return [(path, info) for path, info in iter_fields(Config) if path.split(".")[0] in ROLES]


def _leaves():
    return [(path, info) for path, info in _worker_fields() if section_class(info.type) is None]


def _refs():
    return [(ref, path) for path, info in _worker_fields() for ref in info.refs]


def _unsupported() -> dict[str, str]:
    out: dict[str, str] = {}
    for module in MODULES:
        for key, reason in getattr(module, "UNSUPPORTED", {}).items():
            assert key not in out, f"{key} is in two UNSUPPORTED dicts"
            out[key] = reason
    return out


def _negated() -> dict[str, str]:
    return {k: v for m in MODULES for k, v in getattr(m, "NEGATED_REFS", {}).items()}


def _homes() -> set[str]:
    return {ref for ref, _ in _refs()} | set(_unsupported()) | set(_negated())


def _documented() -> set[str]:
    """Every key docs/config-mapping.md documents (fields, NEGATED_REFS, UNSUPPORTED, NO_EFFECT, the dialects' RULES)."""
    return {f"{r.framework}:{r.key}" for r in mapping_rows()}


def test_config_instantiates_and_validates_empty():
    cfg = Config()
    assert validate({}) == cfg
    assert cfg.rollout.name == "hf" and cfg.actor.optim.lr == 1e-6 and cfg.critic.optim.lr == 1e-5


def test_every_field_has_a_one_line_doc():
    for path, info in _worker_fields():
        assert info.doc.strip(), f"{path} has no doc"
        assert "\n" not in info.doc, f"{path}: doc must be one line"
    for path, info in _worker_fields():
        sub = section_class(info.type)
        if sub is not None:
            assert (sub.__doc__ or "").strip(), f"section class of {path} has no docstring"


def test_refs_are_well_formed_resolved_and_unique():
    seen: dict[str, str] = {}
    for ref, path in _refs():
        framework, _, key = ref.partition(":")
        assert framework in FRAMEWORKS and key, f"{path}: bad ref {ref!r}"
        assert not key.startswith(".") and ".." not in key, f"{path}: relative ref {ref!r} was not resolved"
        assert " " not in key, f"{path}: ref {ref!r} has a space"
        assert ref not in seen, f"{ref} names both {seen[ref]} and {path}"
        seen[ref] = path


def test_relative_refs_resolve_per_role():
    refs = {ref: path for ref, path in _refs()}
    assert refs["verl:actor_rollout_ref.actor.optim.lr"] == "actor.optim.lr"
    assert refs["verl:critic.optim.lr"] == "critic.optim.lr"
    assert refs["roll:critic.training_args.learning_rate"] == "critic.optim.lr"
    assert refs["trinity:algorithm.optimizer.lr"] == "actor.optim.lr"
    assert "trinity:.lr" not in refs  # Trinity's optimizer is the actor's only
    assert refs["verl:actor_rollout_ref.ref.fsdp_config.param_offload"] == "ref.fsdp_config.param_offload"
    assert refs["verl:critic.model.fsdp_config.wrap_policy.min_num_params"] == "critic.fsdp_config.min_num_params"


def test_unsupported_entries_are_well_formed_and_not_also_fields():
    refs = {ref for ref, _ in _refs()}
    for key, reason in {**_unsupported(), **_negated()}.items():
        framework, _, dotted = key.partition(":")
        assert framework in FRAMEWORKS and dotted and not dotted.startswith("."), key
        assert reason.strip() and "\n" not in reason, f"{key}: needs a one-line reason"
        assert key not in refs, f"{key} is both a field ref and refused"


def test_my_refs_are_not_claimed_by_other_sections():
    mine = _homes()
    others = {ref for path, info in iter_fields(Config) if path.split(".")[0] not in ROLES for ref in info.refs}
    for name in ("data", "model", "algorithm", "reward", "trainer", "cluster"):
        module = importlib.import_module(f"posttrain.config.sections.{name}")
        others |= set(getattr(module, "UNSUPPORTED", {})) | set(getattr(module, "NEGATED_REFS", {}))
    assert not mine & others, f"claimed twice: {sorted(mine & others)}"


def _check(info, value) -> list[str]:
    problems = []
    for item in value if isinstance(value, list) else [value]:
        if info.choices is not None and item not in info.choices:
            problems.append(f"{item!r} not in {info.choices}")
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            for op, bound in info.bounds.items():
                ok = {"ge": item >= bound, "gt": item > bound, "le": item <= bound, "lt": item < bound}[op]
                if not ok:
                    problems.append(f"{item!r} violates {op} {bound}")
    return problems


def test_defaults_are_within_their_own_bounds_and_choices():
    for path, info in _leaves():
        assert info.has_default(), f"{path} has no default"
        assert not _check(info, info.default()), f"{path}: {_check(info, info.default())}"


# Choices that are valid only with other keys set (their load checks say which): those keys.
COMPANIONS = {
    # an external endpoint is benched only, by model id, over each row's chat messages (check_external)
    ("rollout.name", "external"): ["trainer.mode=bench", "rollout.external.model_name=m", "data.return_raw_chat=true"],
    # verl's cut of a token-budget batch: with dynamic batch size only (check_dynamic_bsz_partition)
    ("actor.dynamic_bsz_partition", "balanced"): ["actor.use_dynamic_bsz=true"],
    ("critic.dynamic_bsz_partition", "balanced"): ["critic.use_dynamic_bsz=true"],
}


def test_every_choice_of_an_implemented_field_is_accepted():
    for path, info in _leaves():
        if info.choices is None or info.todo:
            continue
        for choice in info.choices:
            # a list field: the choice added to the default (a list of one choice may be refused as a
            # whole: save_contents without the weights)
            value = list(dict.fromkeys([*info.default(), choice])) if isinstance(info.default(), list) else choice
            # sharding keys act only on several worker processes (refused with one: test_config_checks)
            world = ["cluster.n_gpus_per_node=2"] if ".fsdp_config." in path else []
            world += COMPANIONS.get((path, choice), [])
            typed = "null" if value is None else value  # an override's None is YAML's null
            cfg = load_config(None, world + ([f"{path}={typed}"] if not isinstance(value, list) else [f"{path}=[{','.join(value)}]"]))
            section, _, name = path.rpartition(".")
            node = cfg
            for part in section.split("."):
                node = getattr(node, part)
            assert getattr(node, name) == value


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor.clip_ratio_c=1.0", "must be > 1"),
        ("actor.loss_agg_mode=token-avg", "not one of"),
        ("actor.kl_loss_type=k4", "not one of"),
        ("rollout.top_p=0", "must be > 0"),
        ("rollout.n=0", "must be >= 1"),
        ("rollout.num_beams=4", "beam search returns the most likely sequences, not independent samples"),
        ("actor.optim.lr_scheduler_type=polynomial", "not one of"),
        ("actor.optim.betas=[0.9,1.0]", "must be < 1"),
        ("critic.cliprange_value=0", "must be > 0"),
    ],
)
def test_out_of_range_values_are_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_names_the_config_machinery_relies_on_exist():
    paths = {path for path, _ in _worker_fields()}
    for path in (
        "rollout.n", "rollout.val_kwargs.do_sample", "rollout.val_kwargs.temperature",
        "actor.ppo_mini_batch_size", "actor.ppo_micro_batch_size_per_gpu", "actor.use_dynamic_bsz",
        "actor.ppo_max_token_len_per_gpu", "actor.ppo_epochs", "actor.clip_ratio_c",
        "actor.optim.lr_warmup_steps", "actor.optim.lr_warmup_steps_ratio",
        "critic.ppo_mini_batch_size", "critic.ppo_micro_batch_size_per_gpu",
        "critic.optim.lr_warmup_steps", "critic.optim.lr_warmup_steps_ratio",
        "ref.log_prob_micro_batch_size_per_gpu",
    ):
        assert path in paths, path


def test_constants_match_the_code_that_honours_them():
    from posttrain.algorithms.aggregation import LOSS_AGG_MODES
    from posttrain.algorithms.kl import KL_PENALTY_KINDS
    from posttrain.config.sections import actor, optim
    from posttrain.optim.optimizers import OPTIMIZERS
    from posttrain.optim.schedules import SCHEDULES

    assert optim.OPTIMIZERS == tuple(OPTIMIZERS)
    assert actor.LOSS_AGG_MODES == LOSS_AGG_MODES
    assert actor.KL_LOSS_TYPES == KL_PENALTY_KINDS
    assert optim.SCHEDULERS == SCHEDULES


def test_sections_are_frozen():
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.actor.clip_ratio = 0.3  # type: ignore[misc]
    assert all(f.kw_only for f in dataclasses.fields(type(cfg.rollout)))
    assert [f.name for f in section_fields(type(cfg.critic.optim))] == [f.name for f in section_fields(type(cfg.actor.optim))]


# ---- every parameter the guides describe for these roles has a home ---------------------------

_V_ROLL = "verl:actor_rollout_ref.rollout."
_V_ACT = "verl:actor_rollout_ref.actor."
_V_REF = "verl:actor_rollout_ref.ref."

VERL_KEYS = [
    "verl:actor_rollout_ref.hybrid_engine",
    *(_V_ROLL + k for k in (
        "name", "mode", "temperature", "top_k", "top_p", "do_sample", "n", "prompt_length", "response_length",
        "dtype", "gpu_memory_utilization", "ignore_eos", "enforce_eager", "free_cache_engine", "load_format",
        "tensor_model_parallel_size", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
        "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu", "log_prob_use_dynamic_bsz",
        "log_prob_max_token_len_per_gpu", "disable_log_stats", "enable_chunked_prefill", "use_fire_sampling",
        "calculate_log_probs", "repetition_penalty",
        "val_kwargs.top_k", "val_kwargs.top_p", "val_kwargs.temperature", "val_kwargs.n", "val_kwargs.do_sample",
        "engine_kwargs.vllm", "engine_kwargs.sglang", "checkpoint_engine.update_weights_bucket_megabytes",
        "multi_turn.enable", "multi_turn.max_turns", "multi_turn.tool_config_path", "multi_turn.format",
        "multi_turn.completion_callback", "multi_turn.use_inference_chat_template",
        "multi_turn.enable_tokenization_sanity_check", "multi_turn.max_assistant_turns", "multi_turn.max_user_turns",
        "multi_turn.max_parallel_calls", "multi_turn.max_tool_response_length", "multi_turn.tool_response_truncate_side",
        "multi_turn.interaction_config_path", "multi_turn.tokenization_sanity_check_mode", "multi_turn.num_repeat_rollouts",
        "agent.custom_async_server.path", "agent.custom_async_server.name",
    )),
    *(_V_ACT + k for k in (
        "strategy", "ppo_mini_batch_size", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu",
        "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "grad_clip", "clip_ratio", "clip_ratio_low",
        "clip_ratio_high", "clip_ratio_c", "loss_agg_mode", "entropy_coeff", "use_kl_loss", "use_torch_compile",
        "kl_loss_coef", "kl_loss_type", "ppo_epochs", "data_loader_seed", "shuffle", "ulysses_sequence_parallel_size",
        "entropy_from_logits_with_chunking", "entropy_checkpointing",
        "policy_loss.loss_mode", "policy_loss.clip_cov_ratio", "policy_loss.clip_cov_lb", "policy_loss.clip_cov_ub",
        "policy_loss.kl_cov_ratio", "policy_loss.ppo_kl_coef",
        "checkpoint.save_contents", "checkpoint.load_contents",
        "fsdp_config.wrap_policy.min_num_params", "fsdp_config.param_offload", "fsdp_config.optimizer_offload",
        "fsdp_config.offload_policy", "fsdp_config.reshard_after_forward", "fsdp_config.fsdp_size",
        "fsdp_config.forward_prefetch",
        "profiler.discrete", "profiler.all_ranks", "profiler.ranks",
        "optim.lr", "optim.lr_warmup_steps", "optim.lr_warmup_steps_ratio", "optim.min_lr_ratio",
        "optim.num_cycles", "optim.warmup_style", "optim.total_training_steps", "optim.weight_decay",
        "optim.optimizer", "optim.clip_grad", "optim.lr_warmup_init", "optim.lr_decay_steps",
        "optim.lr_decay_style", "optim.min_lr", "optim.weight_decay_incr_style", "optim.lr_wsd_decay_style",
        "optim.lr_wsd_decay_steps", "optim.use_checkpoint_opt_param_scheduler",
    )),
    *(_V_REF + k for k in (
        "strategy", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu", "log_prob_use_dynamic_bsz",
        "log_prob_max_token_len_per_gpu", "ulysses_sequence_parallel_size", "entropy_from_logits_with_chunking",
        "entropy_checkpointing", "fsdp_config.param_offload", "fsdp_config.reshard_after_forward",
        "fsdp_config.forward_prefetch", "fsdp_config.wrap_policy.min_num_params", "fsdp_config.fsdp_size",
        "profiler.discrete", "profiler.all_ranks", "profiler.ranks",
    )),
    *("verl:critic." + k for k in (
        "strategy", "optim.lr", "optim.lr_warmup_steps_ratio", "optim.warmup_style", "optim.total_training_steps",
        "model.path", "model.tokenizer_path", "model.override_config", "model.external_lib",
        "model.enable_gradient_checkpointing", "model.use_remove_padding", "model.fsdp_config.param_offload",
        "model.fsdp_config.optimizer_offload", "model.fsdp_config.wrap_policy.min_num_params",
        "model.fsdp_config.fsdp_size", "model.fsdp_config.forward_prefetch",
        "ppo_mini_batch_size", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu",
        "forward_micro_batch_size", "forward_micro_batch_size_per_gpu", "use_dynamic_bsz",
        "ppo_max_token_len_per_gpu", "forward_max_token_len_per_gpu", "ulysses_sequence_parallel_size",
        "ppo_epochs", "shuffle", "grad_clip", "cliprange_value", "loss_agg_mode",
        "checkpoint.save_contents", "checkpoint.load_contents",
    )),
    # verl's SFT trainer optimizer
    "verl:optim.lr", "verl:optim.weight_decay", "verl:optim.warmup_steps_ratio", "verl:optim.clip_grad",
    "verl:optim.lr_scheduler",
]

ROLL_KEYS = [
    "roll:num_return_sequences_in_group", "roll:ppo_epochs", "roll:max_grad_norm", "roll:l2", "roll:use_kl_loss",
    "roll:kl_loss_coef", "roll:entropy_loss_coef", "roll:sft_loss_coef", "roll:use_topr_loss", "roll:rl_loss_coef",
    "roll:dual_clip_loss", "roll:loss_agg_mode", "roll:pg_clip", "roll:value_clip",
    "roll:generate_opt_level", "roll:is_num_return_sequences_expand", "roll:max_running_requests",
    *(f"roll:actor_infer.generating_args.{k}" for k in (
        "max_new_tokens", "temperature", "top_p", "top_k", "num_beams", "num_return_sequences")),
    *(f"roll:validation.generating_args.{k}" for k in (
        "max_new_tokens", "temperature", "top_p", "top_k", "num_beams", "num_return_sequences")),
    *(f"roll:actor_infer.strategy_args.{k}" for k in (
        "strategy_name", "strategy_config.gpu_memory_utilization",
        "strategy_config.max_model_len", "strategy_config.load_format", "strategy_config.mem_fraction_static")),
    "roll:actor_infer.num_gpus_per_worker", "roll:actor_infer.model_args.dtype",
    "roll:actor_infer.model_args.disable_gradient_checkpointing",
    *(f"roll:{role}.{k}" for role in ("actor_infer", "actor_train", "reference", "critic")
      for k in ("infer_batch_size", "world_size")),
    *(f"roll:{role}.strategy_args.{k}" for role in ("actor_train", "reference", "critic")
      for k in ("strategy_name", "strategy_config", "strategy_config.tensor_model_parallel_size",
                "strategy_config.pipeline_model_parallel_size", "strategy_config.expert_model_parallel_size",
                "strategy_config.context_parallel_size", "strategy_config.virtual_pipeline_model_parallel_size",
                "strategy_config.sequence_parallel", "strategy_config.recompute_granularity",
                "strategy_config.moe_layer_recompute", "strategy_config.moe_token_dispatcher_type",
                "strategy_config.moe_grouped_gemm", "strategy_config.moe_shared_expert_overlap",
                "strategy_config.overlap_grad_reduce")),
    *(f"roll:{role}.training_args.{k}" for role in ("actor_train", "critic")
      for k in ("learning_rate", "weight_decay", "per_device_train_batch_size", "gradient_accumulation_steps",
                "warmup_steps", "lr_scheduler_type", "num_train_epochs")),
    "roll:reference.model_args.dtype", "roll:reference.model_args.disable_gradient_checkpointing",
    "roll:critic.model_args.dtype", "roll:critic.model_args.disable_gradient_checkpointing",
]

_T_RM = "trinity:explorer.rollout_model."
TRINITY_KEYS = [
    *(_T_RM + k for k in (
        "engine_type", "engine_num", "tensor_parallel_size", "enable_history", "enable_prefix_caching",
        "enforce_eager", "dtype", "seed", "gpu_memory_utilization", "enable_chunked_prefill")),  # enable_thinking: data.enable_thinking
    "trinity:algorithm.repeat_times", "trinity:algorithm.optimizer.lr", "trinity:algorithm.optimizer.warmup_style",
    "trinity:algorithm.optimizer.lr_warmup_steps_ratio", "trinity:algorithm.kl_loss_fn",
    "trinity:algorithm.entropy_loss_fn", "trinity:algorithm.loss_agg_mode", "trinity:algorithm.policy_loss_fn",
    "trinity:algorithm.policy_loss_fn_args.clip_range_low", "trinity:algorithm.policy_loss_fn_args.clip_range_high",
    "trinity:algorithm.kl_loss_fn_args.kl_coef",
    "trinity:trainer.grad_clip", "trinity:trainer.use_dynamic_bsz", "trinity:trainer.max_token_len_per_gpu",
    "trinity:trainer.ulysses_sequence_parallel_size", "trinity:trainer.trainer_strategy",
    "trinity:model.repetition_penalty", "trinity:model.critic_model_path",
]


@pytest.mark.parametrize("framework_keys", [VERL_KEYS, ROLL_KEYS, TRINITY_KEYS], ids=["verl", "roll", "trinity"])
def test_every_documented_key_has_a_home(framework_keys):
    homes = _documented()
    missing = [key for key in framework_keys if key not in homes]
    assert not missing, f"no field or UNSUPPORTED entry for: {missing}"


def test_entropy_chunking_is_accepted_because_posttrain_always_chunks():
    from posttrain.config.explain import explain
    from posttrain.models.logprobs import MAX_CHUNK_ELEMENTS

    cfg = load_config(None, ["actor.entropy_from_logits_with_chunking=true", "ref.entropy_from_logits_with_chunking=true"])
    assert cfg.actor.entropy_from_logits_with_chunking is True and cfg.ref.entropy_from_logits_with_chunking is True
    assert "status:   implemented" in explain("actor.entropy_from_logits_with_chunking")
    assert MAX_CHUNK_ELEMENTS == 2**26  # the chunk size the field's doc names
