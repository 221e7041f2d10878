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


def test_verl_0_8_s_legacy_workers_weigh_micro_batches_by_their_rows():
    """verl 0.8's legacy actor and critic (use_legacy_worker_impl auto, its default) scale each
    micro-batch's own loss mean by 1 / the accumulation steps; its engine workers (disable, and every
    worker of 0.10) divide by the whole mini-batch's counts, posttrain's default."""
    def weights(*words):
        native, report = _line("reward_model.reward_manager=prime", *words)  # a 0.8 line
        assert report.framework_release == "0.8"
        return native.get("actor", {}).get("micro_batch_weight"), native.get("critic", {}).get("micro_batch_weight"), report

    actor, critic, report = weights()
    assert (actor, critic) == ("rows", "rows")  # verl's default estimator is gae: the critic too
    reasons = {e.native: e.reason for e in report.entries if e.key == "trainer.use_legacy_worker_impl"}
    assert reasons["actor.micro_batch_weight"].startswith("verl 0.8's legacy actor (use_legacy_worker_impl auto")
    assert "scales each micro-batch's own loss mean by 1 / the accumulation steps" in reasons["critic.micro_batch_weight"]
    assert weights("algorithm.adv_estimator=grpo")[:2] == ("rows", None)  # no critic
    # with dynamic batch size the role cuts its micro-batches as verl does, so the rows-weighted means are of the same rows
    native, _ = _line("reward_model.reward_manager=prime", "actor_rollout_ref.actor.use_dynamic_bsz=true")
    assert native["actor"]["dynamic_bsz_partition"] == native["critic"]["dynamic_bsz_partition"] == "balanced"  # the critic follows
    native, _ = _line("reward_model.reward_manager=prime", "actor_rollout_ref.actor.use_dynamic_bsz=true", "critic.use_dynamic_bsz=false")
    assert "dynamic_bsz_partition" not in native["critic"]
    assert "dynamic_bsz_partition" not in _line("reward_model.reward_manager=prime")[0]["actor"] and "dynamic_bsz_partition" not in _line(
        "critic.fsdp.param_offload=true", "actor_rollout_ref.actor.use_dynamic_bsz=true")[0]["actor"]  # 0.10: normaliser, any cut
    assert weights("trainer.use_legacy_worker_impl=disable")[:2] == (None, None)
    newer, new_report = _line("critic.fsdp.param_offload=true")  # a 0.10 line
    assert new_report.framework_release == "0.10" and newer.get("actor", {}).get("micro_batch_weight") is None


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
    _, veomni = _line("model_engine=veomni")  # its sections translate (tests/config/test_verl_veomni.py)
    assert not veomni.refused and "VeOmni" in veomni.entry("actor_rollout_ref.actor.strategy").reason
    with pytest.raises(ConfigError, match="TorchTitan"):
        _line("model_engine=torchtitan")
    with pytest.raises(ConfigError, match="model_engine is one of dp, megatron, veomni, torchtitan"):
        _line("model_engine=")


def test_a_key_neither_release_has_is_hydra_s_error():
    with pytest.raises(ConfigError, match="has no key critic.fsdp.param_ofload"):
        _line("critic.fsdp.param_ofload=true")


def test_verl_0_10_launcher_and_new_sections_have_their_reasons():
    _, report = _line("ray_kwargs.ray_init.runtime_env.py_executable=uv run --extra vllm", "trainer.use_v1=false",
                      "skip.rollout.enable=true", "actor_rollout_ref.actor.checkpoint.strict=false")
    assert report.entry("ray_kwargs.ray_init.runtime_env.py_executable").status == "dropped"
    assert report.entry("trainer.use_v1").status == "dropped"
    assert report.entry("actor_rollout_ref.actor.checkpoint.strict").status == "dropped"
    refused = {e.key: e.reason for e in report.refused}
    assert "rollout cache" in refused["skip"]
    # a section refused as a whole names the override that set a key in it
    with pytest.raises(ConfigError, match=r"command line override 'skip.rollout.enable=true': skip: not supported"):
        verl_launch_native("skip.rollout.enable=true")


def verl_launch_native(*words: str):
    from posttrain.config.dialects import foreign_native

    return foreign_native("verl", None, list(words))


@pytest.mark.parametrize("tree", [("ppo_trainer", "0.10"), ("ppo_trainer", "0.8"), ("ppo_megatron_trainer", "0.10"), ("sft_trainer", "0.8")])
def test_each_complete_default_trainer_config_loads_with_nothing_refused(tree, tmp_path):
    path = shutil.copy(verl_launch.FILES[tree], tmp_path / "trainer.yaml")
    foreign = read_foreign(path, "verl")
    assert [e.line() for e in foreign.report.refused] == []


# ---- verl 0.10's on-policy distillation --------------------------------------------------------

_OPD = ("distillation.enabled=True", "distillation.teacher_models.teacher_model.model_path=/models/teacher",
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=2",
        "distillation.distillation_loss.loss_mode=k1", "distillation.distillation_loss.use_policy_gradient=True",
        "distillation.distillation_loss.use_task_rewards=False", "distillation.distillation_loss.loss_max_clamp=10.0",
        "algorithm.adv_estimator=grpo", "data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=64")


def test_policy_gradient_k1_distillation_is_on_policy_distill_with_the_teacher_as_reference():
    native, report = _line(*_OPD, "actor_rollout_ref.actor.clip_ratio_high=0.28")
    algo, actor = native["algorithm"], native["actor"]
    assert algo["adv_estimator"] == "on_policy_distill" and algo["adv_estimator_args"] == {"kl_coef": 1.0}
    assert algo["advantage_clip"] == 10.0 and native["ref"]["model_path"] == "/models/teacher"
    # the distillation term's own clip range and dual clip 3; the actor's (task term) clip is not read
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"], actor["clip_ratio_c"], actor["dual_clip"]) == (0.2, 0.2, 3.0, True)
    assert actor["entropy_coeff"] == 0.0 and actor["policy_loss"]["loss_mode"] == "vanilla"
    assert report.entry("actor_rollout_ref.actor.clip_ratio_high").status == "dropped"
    assert report.entry("algorithm.adv_estimator").status == "dropped"
    assert "engine" in report.entry("distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size").reason
    assert not report.refused


def test_several_named_teachers_become_ref_teachers_routed_by_the_reward_fn_key_column():
    native, report = _line(*_OPD, "distillation.teacher_key=data_source",
                           "+distillation.teacher_models.gsm8k.key=openai/gsm8k", "+distillation.teacher_models.gsm8k.model_path=/models/a",
                           "+distillation.teacher_models.geo.key=geo3k", "+distillation.teacher_models.geo.model_path=/models/b")
    assert native["ref"]["teachers"] == {"gsm8k": {"model_path": "/models/a", "tag_included": ["openai/gsm8k"], "kl_coef": 1.0},
                                         "geo": {"model_path": "/models/b", "tag_included": ["geo3k"], "kl_coef": 1.0}}
    assert "model_path" not in native["ref"] and not report.refused
    _, other = _line(*_OPD, "distillation.teacher_key=domain", "+distillation.teacher_models.a.key=x", "+distillation.teacher_models.a.model_path=/a",
                     "+distillation.teacher_models.b.key=y", "+distillation.teacher_models.b.model_path=/b")
    assert any("data.reward_fn_key" in e.reason for e in other.refused)


@pytest.mark.parametrize("change, why", [
    ("distillation.distillation_loss.loss_mode=forward_kl_topk", "forward_kl_topk with use_policy_gradient true"),
    ("distillation.distillation_loss.use_task_rewards=True", "use_task_rewards true"),
    ("actor_rollout_ref.rollout.temperature=0.7", "temperature 0.7"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=16", "one optimizer step per batch"),
    ("actor_rollout_ref.actor.use_kl_loss=True", "use_kl_loss true"),
])
def test_distillation_that_on_policy_distill_does_not_compute_is_refused_saying_why(change, why):
    _, report = _line(*_OPD, change)
    reasons = [e.reason for e in report.refused if e.key.startswith("distillation.")]
    assert reasons and all(why in r for r in reasons)


_TOPK = (*_OPD, "distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.use_policy_gradient=False",
         "distillation.distillation_loss.topk=64", "distillation.distillation_loss.log_prob_min_clamp=-10.0",
         "actor_rollout_ref.rollout.temperature=0.7", "actor_rollout_ref.actor.ppo_mini_batch_size=16")


def test_supervised_top_k_distillation_is_actor_topk_kl_with_the_teacher_as_reference():
    native, report = _line(*_TOPK, "actor_rollout_ref.actor.clip_ratio_high=0.28", "+distillation.distillation_loss.use_chunked_topk=True")
    assert native["actor"]["topk_kl"] == {"k": 64, "log_prob_min_clamp": -10.0, "loss_max_clamp": 10.0, "policy_loss": False}
    assert native["ref"]["model_path"] == "/models/teacher" and native["actor"]["entropy_coeff"] == 0.0
    # the task's PPO term is not in verl's loss: its estimator and clip range are read by nothing
    assert native.get("algorithm", {}).get("adv_estimator") is None
    assert report.entry("actor_rollout_ref.actor.clip_ratio_high").status == "dropped"
    assert "same numbers" in report.entry("distillation.distillation_loss.use_chunked_topk").reason
    # a supervised term of the current policy: neither the rollout temperature nor several mini-batches stand in the way
    assert not report.refused


def test_top_k_distillation_beside_the_task_loss_keeps_the_task_s_settings():
    native, report = _line(*_TOPK, "distillation.distillation_loss.use_task_rewards=True",
                           "distillation.distillation_loss.distillation_loss_coef=0.5", "actor_rollout_ref.actor.clip_ratio_high=0.28")
    assert native["actor"]["topk_kl"]["policy_loss"] is True and native["actor"]["topk_kl"]["coef"] == 0.5
    assert native["algorithm"]["adv_estimator"] == "grpo" and native["actor"]["clip_ratio_high"] == 0.28
    assert not report.refused


@pytest.mark.parametrize("change, why", [
    ("distillation.distillation_loss.use_policy_gradient=True", "minus each token's top-k KL as a PPO advantage"),
    ("+distillation.teacher_models.second.model_path=/b", "takes one teacher"),
])
def test_top_k_distillation_posttrain_does_not_compute_is_refused(change, why):
    _, report = _line(*_TOPK, "+distillation.teacher_models.first.model_path=/a", change)
    reasons = [e.reason for e in report.refused if e.key.startswith("distillation.")]
    assert reasons and all(why in r for r in reasons)


def test_distillation_off_reads_nothing_of_the_section():
    native, report = _line("distillation.enabled=False", "distillation.distillation_loss.loss_mode=k1")
    assert report.entry("distillation.distillation_loss.loss_mode").status == "dropped"
    assert native.get("algorithm", {}).get("adv_estimator") != "on_policy_distill"


def test_verl_0_10_engine_section_holds_the_role_s_ulysses_size_and_entropy_options():
    native, report = _line("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
                           "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size=2",
                           "actor_rollout_ref.actor.fsdp_config.entropy_checkpointing=True", "critic.fsdp.param_offload=false")
    assert native["actor"]["ulysses_sequence_parallel_size"] == native["ref"]["ulysses_sequence_parallel_size"] == 2
    assert native["actor"]["entropy_checkpointing"] is True
    # a role-level size above 1 is copied over the engine's by verl 0.10
    native, report = _line("actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
                           "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2", "critic.fsdp.param_offload=false")
    assert native["actor"]["ulysses_sequence_parallel_size"] == 4
    assert report.entry("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size").status == "dropped"


def test_a_bash_array_spanning_lines_gives_every_item(tmp_path):
    from posttrain.config.dialects.launch_script import extract

    script = ("N=4\nARGS=(\n    algorithm.adv_estimator=grpo\n    # a comment\n    trainer.n_gpus_per_node=${N}\n"
              "    data.train_batch_size=8\n)\npython3 -m verl.trainer.main_ppo \"${ARGS[@]}\" trainer.nnodes=1\n")
    assert extract(script, {}, script="run.sh").words == ["algorithm.adv_estimator=grpo", "trainer.n_gpus_per_node=4",
                                                          "data.train_batch_size=8", "trainer.nnodes=1"]


def test_convert_names_the_release_the_line_was_read_with():
    from posttrain.config.dialects import convert

    text, foreign, _ = convert(None, "verl", ["critic.fsdp.param_offload=true"])
    assert foreign.report.framework_release == "0.10" and "verl 0.10 config" in text
    text, foreign, _ = convert(None, "verl", ["critic.model.fsdp_config.param_offload=true"])
    assert "verl 0.8 config" in text


def test_a_config_group_choice_is_one_error_saying_what_to_do():
    with pytest.raises(ConfigError, match=r"a choice of Hydra's config group 'actor' for actor_rollout_ref.actor \(option 'mlite_actor'\)"):
        _line("actor@actor_rollout_ref.actor=mlite_actor")


def test_verl_sapo_is_posttrain_sapo_aggregated_as_verl_forces_it():
    native, report = _line("actor_rollout_ref.actor.policy_loss.loss_mode=sapo", "actor_rollout_ref.actor.tau_neg=1.2",
                           "+actor_rollout_ref.actor.policy_loss.tau_pos=1.5")
    actor = native["actor"]
    assert actor["policy_loss"] == {"loss_mode": "sapo", "loss_args": {"tau_neg": 1.2}}
    assert actor["loss_agg_mode"] == "seq-mean-token-mean"  # verl's sapo ignores loss_agg_mode (token-mean here)
    # policy_loss.tau_pos is read by no verl code (its loss reads the actor's tau_pos)
    assert report.entry("actor_rollout_ref.actor.policy_loss.tau_pos").status == "dropped"
    # with an entropy term, verl aggregates the two differently, which one loss_agg_mode cannot say
    _, refused = _line("actor_rollout_ref.actor.policy_loss.loss_mode=sapo", "actor_rollout_ref.actor.entropy_coeff=0.01")
    assert refused.entry("actor_rollout_ref.actor.loss_agg_mode").status == "refused"
    # the taus of another loss are not read
    assert _line("actor_rollout_ref.actor.tau_neg=1.2")[1].entry("actor_rollout_ref.actor.tau_neg").status == "dropped"


def test_one_named_teacher_replaces_verl_s_default_teacher_model():
    native, report = _line(*_OPD, "+distillation.teacher_models.math.key=math", "+distillation.teacher_models.math.model_path=/models/math")
    assert native["ref"]["model_path"] == "/models/math"  # verl pops teacher_model once a named teacher is given
    assert report.entry("distillation.teacher_models.math.model_path").native == "ref.model_path"
    assert "default teacher_model" in report.entry("distillation.teacher_models.teacher_model.model_path").reason


def test_verl_gdpo_line_is_posttrain_gdpo_with_its_component_keys():
    native, report = _line("algorithm.adv_estimator=gdpo", '+algorithm.gdpo_reward_keys=["accuracy_reward", "format_reward"]',
                           "+algorithm.gdpo_reward_weights=[1.0,0.5]", "reward.reward_manager.name=gdpo")
    assert not report.refused
    assert native["algorithm"]["adv_estimator"] == "gdpo"
    assert native["algorithm"]["gdpo_reward_keys"] == ["accuracy_reward", "format_reward"]
    assert native["algorithm"]["gdpo_reward_weights"] == [1.0, 0.5]
    assert native["reward"]["reward_manager"] == "naive"  # verl's gdpo manager: the naive one's calls, every dict key kept


def test_the_image_patch_size_is_checked_against_the_models_processor(tmp_path):
    # verl reads it only in its overlong-prompt filter; its model is given images at the processor's patch size
    model = tmp_path / "vl"
    model.mkdir()
    (model / "preprocessor_config.json").write_text('{"patch_size": 14}')
    on = ("data.filter_overlong_prompts=true", f"actor_rollout_ref.model.path={model}")

    def entry(*words):
        return _line(*words)[1].entry("data.image_patch_size")

    assert entry("data.image_patch_size=14", *on).status == "dropped"  # the model's own
    wrong = entry("data.image_patch_size=16", *on)
    assert wrong.status == "refused" and "at its processor's patch size 14" in wrong.reason and "set it to 14" in wrong.reason
    off = entry("data.image_patch_size=16", f"actor_rollout_ref.model.path={model}")
    assert off.status == "dropped" and "overlong-prompt filter, which is off" in off.reason
    absent = entry("data.image_patch_size=16", "data.filter_overlong_prompts=true", f"actor_rollout_ref.model.path={tmp_path / 'none'}")
    assert absent.status == "dropped" and "checked once the model is on this machine" in absent.reason
