"""Schema checks of the core sections: algorithm, reward, trainer, cluster and the decoupled/agentic ones.

Every field has a doc, well-formed and unique refs, defaults inside their own bounds and choices; key
reference names have a home (a field's refs or the module's UNSUPPORTED table). That every field
without `todo` changes what a run does is tests/trainer/test_honoured_keys.py's job.
"""

from __future__ import annotations

import dataclasses
import operator

import pytest

from posttrain.config.fields import FRAMEWORKS, find_field, iter_fields, section_class, section_doc
from posttrain.config.schema import Config
from posttrain.config.sections import (
    algorithm,
    buffer,
    cluster,
    data,
    data_processor,
    env,
    explorer,
    log,
    profiler,
    reward,
    service,
    synchronizer,
    trainer,
)

# data: the Trinity taskset format keys a synchronous run reads are data.* fields
MODULES = (algorithm, reward, trainer, profiler, cluster, log, env, explorer, buffer, synchronizer, service, data_processor, data)
ROOTS = {
    "algorithm": algorithm.AlgorithmConfig,
    "reward": reward.RewardConfig,
    "trainer": trainer.TrainerConfig,
    "profiler": profiler.GlobalProfilerConfig,
    "cluster": cluster.ClusterConfig,
    "log": log.LogConfig,
    "env": env.EnvConfig,
    "explorer": explorer.ExplorerConfig,
    "buffer": buffer.BufferConfig,
    "synchronizer": synchronizer.SynchronizerConfig,
    "data_processor": data_processor.DataProcessorConfig,
    "data": data.DataConfig,
}


def _all_fields():
    """(dotted path, FieldInfo) of every leaf field of these sections, refs resolved."""
    return [
        (path, info)
        for name, cls in ROOTS.items()
        for path, info in iter_fields(cls, f"{name}.")
        if section_class(info.type) is None
    ]


def _all_refs() -> list[str]:
    return [ref for _, info in _all_fields() for ref in info.refs]


def _unsupported() -> dict[str, str]:
    merged: dict[str, str] = {}
    for module in MODULES:
        for key in module.UNSUPPORTED:
            assert key not in merged, f"{key} is in two UNSUPPORTED tables"
        merged.update(module.UNSUPPORTED)
    return merged


def test_config_instantiates_with_all_sections():
    config = Config()
    for name, cls in ROOTS.items():
        assert isinstance(getattr(config, name), cls)
    assert config.trainer.total_epochs == 1 and config.trainer.total_training_steps is None
    assert config.cluster.nnodes == 1 and config.cluster.n_gpus_per_node == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.algorithm.gamma = 0.5  # type: ignore[misc]


def test_every_section_and_field_is_documented():
    for name, root in ROOTS.items():
        assert section_doc(root), f"section {name} needs a docstring"
        for path, info in iter_fields(root, f"{name}."):
            assert info.doc and "\n" not in info.doc, f"{path} needs a one-line doc"
            cls = section_class(info.type)
            assert cls is None or section_doc(cls), f"section {cls.__name__} ({path}) needs a docstring"


def test_refs_are_well_formed_and_unique():
    refs = _all_refs()
    for ref in refs:
        framework, _, key = ref.partition(":")
        assert framework in FRAMEWORKS and key and " " not in key, ref
        assert not key.startswith(".") and not key.endswith("."), f"{ref}: relative ref without a prefix"
    duplicates = {r for r in refs if refs.count(r) > 1}
    assert not duplicates, f"refs claimed twice: {sorted(duplicates)}"


def test_unsupported_tables_are_well_formed_and_disjoint_from_refs():
    unsupported = _unsupported()
    for key, reason in unsupported.items():
        framework, _, dotted = key.partition(":")
        assert framework in FRAMEWORKS and dotted and " " not in dotted, key
        assert reason.strip(), f"{key} needs a reason"
    assert not set(unsupported) & set(_all_refs())


def test_defaults_are_within_their_own_bounds_and_choices():
    ops = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}
    for path, info in _all_fields():
        value = info.default()
        for item in value if isinstance(value, list) else [value]:
            if info.choices is not None:
                assert item in info.choices, f"{path} default {item!r} not in {info.choices}"
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                for op, bound in info.bounds.items():
                    assert ops[op](item, bound), f"{path} default {item!r} violates {op}={bound}"


def test_names_the_config_machinery_relies_on_exist():
    config = Config()
    for path in ("trainer.total_epochs", "trainer.total_training_steps", "cluster.nnodes", "cluster.n_gpus_per_node"):
        section_name, name = path.split(".")
        assert hasattr(getattr(config, section_name), name), path


@pytest.mark.parametrize("key", [
    "verl:algorithm.kl_ctrl.kl_coef", "verl:algorithm.adv_estimator", "verl:algorithm.norm_adv_by_std_in_grpo",
    "verl:algorithm.pf_ppo.weight_pow", "verl:algorithm.filter_groups.enable", "verl:algorithm.rollout_is_threshold",
    "roll:reward_clip", "roll:norm_mean_type", "roll:whiten_advantages", "roll:advantage_clip", "roll:init_kl_coef",
    "roll:lambd", "roll:add_token_level_kl", "roll:reward_normalization.method", "roll:max_len_mask",
    "trinity:algorithm.algorithm_type", "trinity:algorithm.advantage_fn", "trinity:algorithm.kl_penalty_fn",
    "trinity:algorithm.sample_strategy",
    "verl:reward_model.enable", "verl:reward_model.model.path", "verl:reward_model.reward_manager",
    "verl:custom_reward_function.path", "verl:reward_model.overlong_buffer.len", "verl:reward_model.sandbox_fusion.url",
    "roll:rewards",
    "verl:trainer.logger", "verl:trainer.save_freq", "verl:trainer.resume_mode", "verl:trainer.profile_steps",
    "verl:global_profiler.tool", "verl:global_profiler.steps", "verl:global_profiler.profile_continuous_steps",
    "verl:global_profiler.save_path", "verl:reward_model.profiler.enable",
    "roll:exp_name", "roll:max_steps", "roll:track_with", "roll:eval_steps", "roll:save_steps", "roll:seed",
    "trinity:monitor.monitor_type", "trinity:checkpoint_root_dir", "trinity:mode", "trinity:trainer.save_hf_checkpoint",
    "trinity:buffer.total_epochs", "trinity:explorer.eval_interval",
    "verl:ray_init.num_cpus", "verl:trainer.device", "roll:actor_train.device_mapping", "trinity:cluster.node_num",
    "trinity:explorer.runner_per_model", "trinity:explorer.over_rollout.ratio", "trinity:synchronizer.sync_style",
    "trinity:buffer.explorer_input.taskset.format.prompt_key", "trinity:buffer.trainer_input.experience_buffer.replay_buffer.priority_fn",
    "trinity:service.data_juicer.port", "trinity:data_processor.task_pipeline", "trinity:log.level",
    "roll:train_env_manager.group_size", "roll:val_env_manager.tags", "roll:custom_envs",
])
def test_reference_key_has_a_home(key):
    from posttrain.config.mapping import dialect_rules
    from posttrain.config.tables import collect_no_effect

    assert key in set(_all_refs()) | set(_unsupported()) | set(collect_no_effect()) | set(dialect_rules()), f"{key} has no home"


def test_trinity_algorithm_types_map_onto_registered_parts():
    from posttrain.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
    from posttrain.config.dialects import trinity_algorithms as ta

    kinds = find_field(Config, "algorithm.kind")[1].choices
    for name, t in ta.TYPES.items():
        assert t.kind in kinds, name
        assert ta.POLICY_LOSS_FNS[t.policy_loss_fn] in POLICY_LOSSES, name
        if t.kind == "rl":
            assert ta.ADVANTAGE_FNS[t.advantage_fn][0] in ADVANTAGE_ESTIMATORS, name
    assert set(ta.TYPES).isdisjoint(ta.REFUSED)
    # every type Trinity-RFT registers (trinity/algorithm/__init__.py, with jsd) is run or refused
    assert set(ta.TYPES) | set(ta.REFUSED) == {
        "sft", "ppo", "grpo", "reinforceplusplus", "rloo", "opmd", "asymre", "dpo", "topr", "cispo", "gspo", "sapo",
        "mix", "mix_chord", "raft", "sppo", "rec", "multi_step_grpo", "on_policy_distill", "jsd", "grpo_verl"}


@pytest.mark.parametrize("keys, expected", [
    ({}, (None, None)),
    ({"norm_mean_type": "group", "norm_std_type": "batch"}, ("group", "batch")),
    ({"norm_mean_type": "batch", "reward_norm": "group"}, ("batch", None)),  # newest keys win
    ({"reward_norm": "batch"}, ("batch", "batch")),
    ({"reward_norm": "group", "reward_shift": True}, ("group", None)),
    ({"reward_norm": "running", "reward_scale": True}, (None, "running")),
    ({"use_reward_scaling": True}, (None, "running")),
    ({"use_reward_scaling": True, "use_reward_norm": True}, ("running", "running")),
    ({"use_reward_norm": True}, (None, None)),  # ROLL ignores use_reward_norm without use_reward_scaling
])
def test_roll_reward_norm_translation(keys, expected):
    assert algorithm.roll_reward_norm(**keys) == expected


def test_shared_env_manager_section_resolves_refs_per_role():
    refs = dict(_all_fields())
    assert refs["env.train_env_manager.group_size"].refs == ("roll:train_env_manager.group_size",)
    assert refs["env.val_env_manager.group_size"].refs == ("roll:val_env_manager.group_size",)
