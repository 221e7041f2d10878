"""verl launch lines of its 0.8 and 0.10 releases: each read with the release it was written for.

verl 0.10 moved the critic's FSDP settings (critic.fsdp), the reward keys (reward.*), added
model_engine and new sections; 0.8's names are still in its tree but some are no longer read
(posttrain.config.dialects.verl_moved). These tests check which release a line is read with, that a
moved key lands where its 0.8 twin does, and that a key verl 0.10 does not read is dropped saying so.
"""

from __future__ import annotations

import shutil

import pytest

from posttrain.config.dialects import read_foreign, verl_launch
from posttrain.errors import ConfigError


def _line(*words: str):
    native, report, _ = verl_launch.launch(None, list(words))
    return native, report


def test_a_line_with_keys_only_0_10_has_is_read_as_0_10_and_its_moved_keys_land_as_their_0_8_twins_do():
    new, report = _line("reward.reward_manager.name=dapo", "reward.custom_reward_function.path=/tmp/score.py",
                        "critic.fsdp.param_offload=true", "algorithm.adv_estimator=gae")
    old, old_report = _line("reward_model.reward_manager=dapo", "custom_reward_function.path=/tmp/score.py",
                            "critic.model.fsdp_config.param_offload=true", "algorithm.adv_estimator=gae")
    assert (report.framework_release, old_report.framework_release) == ("0.10", "0.8")
    for section in ("reward", "critic"):
        for key in ("reward_manager", "custom_reward_function", "fsdp_config"):
            assert new.get(section, {}).get(key) == old.get(section, {}).get(key)
    assert new["reward"]["custom_reward_function"]["path"] == "/tmp/score.py" and new["critic"]["fsdp_config"]["param_offload"] is True
    # the report names the keys as the line wrote them
    entry = report.entry("critic.fsdp.param_offload")
    assert entry.status == "translated" and entry.native == "critic.fsdp_config.param_offload"
    assert report.entry("critic.model.fsdp_config.param_offload") is None
    assert report.entry("reward.reward_manager.name").status == "translated"


def test_a_line_setting_a_reward_key_verl_0_10_no_longer_reads_is_read_as_0_8():
    native, report = _line("reward_model.reward_manager=prime")
    assert report.framework_release == "0.8" and native["reward"]["reward_manager"] == "parallel"


def test_beside_a_0_10_key_the_0_8_reward_key_is_dropped_as_verl_0_10_ignores_it():
    native, report = _line("reward_model.reward_manager=prime", "critic.fsdp.param_offload=true")
    assert report.framework_release == "0.10"
    entry = report.entry("reward_model.reward_manager")
    assert entry.status == "dropped" and "reads its reward section, reward.*" in entry.reason
    assert native.get("reward", {}).get("reward_manager") != "parallel"
    clip, clip_report = _line("actor_rollout_ref.actor.grad_clip=0.5", "critic.fsdp.param_offload=true")
    assert clip_report.entry("actor_rollout_ref.actor.grad_clip").status == "dropped"
    assert "optim.clip_grad" in clip_report.entry("actor_rollout_ref.actor.grad_clip").reason
    assert clip.get("actor", {}).get("grad_clip") is None
    assert _line("actor_rollout_ref.actor.grad_clip=0.5")[0]["actor"]["grad_clip"] == 0.5  # 0.8 reads it


def test_the_release_s_own_defaults_are_the_ones_translated():
    # rollout.calculate_log_probs: false in verl 0.8, true in 0.10
    assert _line("critic.fsdp.param_offload=true")[0]["rollout"]["calculate_log_probs"] is True
    assert _line("critic.model.fsdp_config.param_offload=true")[0].get("rollout", {}).get("calculate_log_probs") in (None, False)


def test_model_engine_picks_the_engine_s_tree():
    native, report = _line("model_engine=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2")
    assert report.framework_release == "0.10"
    assert report.entry("model_engine").status == "dropped"
    assert report.entry("actor_rollout_ref.actor.megatron.tensor_model_parallel_size").status == "dropped"  # layout on FSDP2
    assert report.entry("actor_rollout_ref.actor.strategy").status == "dropped"  # megatron -> FSDP2
    _, veomni = _line("model_engine=veomni")
    refused = {e.key: e.reason for e in veomni.refused}
    assert "VeOmni" in refused["actor_rollout_ref.actor.strategy"]
    with pytest.raises(ConfigError, match="TorchTitan"):
        _line("model_engine=torchtitan")
    with pytest.raises(ConfigError, match="model_engine is one of dp, megatron, veomni, torchtitan"):
        _line("model_engine=")


def test_a_key_neither_release_has_is_hydra_s_error():
    with pytest.raises(ConfigError, match="has no key critic.fsdp.param_ofload"):
        _line("critic.fsdp.param_ofload=true")


def test_verl_0_10_launcher_and_new_sections_have_their_reasons():
    _, report = _line("ray_kwargs.ray_init.runtime_env.py_executable=uv run --extra vllm", "trainer.use_v1=false",
                      "distillation.enabled=true", "skip.rollout.enable=true")
    assert report.entry("ray_kwargs.ray_init.runtime_env.py_executable").status == "dropped"
    assert report.entry("trainer.use_v1").status == "dropped"
    refused = {e.key: e.reason for e in report.refused}
    assert "distillation section is not translated yet" in refused["distillation"]
    assert "rollout cache" in refused["skip"]
    with pytest.raises(ConfigError, match=r"command line override 'distillation.enabled=true': distillation: not supported"):
        verl_launch_native("distillation.enabled=true")


def verl_launch_native(*words: str):
    from posttrain.config.dialects import foreign_native

    return foreign_native("verl", None, list(words))


@pytest.mark.parametrize("tree", [("ppo_trainer", "0.10"), ("ppo_trainer", "0.8"), ("ppo_megatron_trainer", "0.10"), ("sft_trainer", "0.8")])
def test_each_complete_default_trainer_config_loads_with_nothing_refused(tree, tmp_path):
    path = shutil.copy(verl_launch.FILES[tree], tmp_path / "trainer.yaml")
    foreign = read_foreign(path, "verl")
    assert [e.line() for e in foreign.report.refused] == []
