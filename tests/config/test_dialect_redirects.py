"""Keys verl, ROLL and Trinity-RFT renamed or deprecated, translated to what they meant there."""

from __future__ import annotations

from posttrain.config.dialects import translate


def _native(raw: dict, dialect: str = "verl"):
    native, report = translate(raw, dialect)
    return native, report


def test_a_global_micro_batch_is_divided_over_the_worker_processes():
    raw = {"trainer": {"n_gpus_per_node": 4, "nnodes": 2},
           "actor_rollout_ref": {"actor": {"ppo_micro_batch_size": 16}, "rollout": {"log_prob_micro_batch_size": 17},
                                 "ref": {"log_prob_micro_batch_size": 8}},
           "critic": {"ppo_micro_batch_size": 32, "forward_micro_batch_size": 64}, "reward_model": {"micro_batch_size": 24}}
    native, report = _native(raw)
    assert not report.refused
    # 8 processes: verl floors, 17 // 8 = 2
    assert native["actor"]["ppo_micro_batch_size_per_gpu"] == 2 and native["rollout"]["log_prob_micro_batch_size_per_gpu"] == 2
    assert native["ref"]["log_prob_micro_batch_size_per_gpu"] == 1
    assert native["critic"] == {"ppo_micro_batch_size_per_gpu": 4, "forward_micro_batch_size_per_gpu": 8}
    assert native["reward"]["reward_model"]["micro_batch_size_per_gpu"] == 3


def test_without_devices_one_process_takes_the_whole_global_micro_batch_and_zero_is_refused():
    native, _ = _native({"actor_rollout_ref": {"actor": {"ppo_micro_batch_size": 6}}})
    assert native["actor"]["ppo_micro_batch_size_per_gpu"] == 6
    _, report = _native({"trainer": {"n_gpus_per_node": 4}, "actor_rollout_ref": {"actor": {"ppo_micro_batch_size": 2}}})
    assert "leaves none per process; give at least 4" in report.entry("actor_rollout_ref.actor.ppo_micro_batch_size").reason
    _, report = _native({"actor_rollout_ref": {"actor": {"ppo_micro_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2}}})
    assert "conflicts with" in report.refused[0].reason  # verl refuses both too


def test_remove_previous_ckpt_in_save_keeps_one_checkpoint_per_role():
    native, _ = _native({"trainer": {"remove_previous_ckpt_in_save": True}})
    assert native["trainer"] == {"max_actor_ckpt_to_keep": 1, "max_critic_ckpt_to_keep": 1}
    native, report = _native({"trainer": {"remove_previous_ckpt_in_save": False}})
    assert native == {} and report.entry("trainer.remove_previous_ckpt_in_save").status == "dropped"


def test_data_trust_remote_code_is_the_model_switch():
    native, _ = _native({"data": {"trust_remote_code": True}})
    assert native["model"]["trust_remote_code"] is True
    _, report = _native({"data": {"trust_remote_code": True}, "actor_rollout_ref": {"model": {"trust_remote_code": False}}})
    assert len(report.refused) == 1 and "keep one" in report.refused[0].reason


def test_sft_trainer_optimizer_is_the_actor_optimizer():
    raw = {"optim": {"lr": 1e-5, "weight_decay": 0.01, "warmup_steps_ratio": 0.1, "clip_grad": 2.0, "lr_scheduler": "wsd"}}
    native, report = _native(raw)
    assert not report.refused
    assert native["actor"]["optim"] == {"lr": 1e-5, "weight_decay": 0.01, "lr_warmup_steps_ratio": 0.1, "lr_scheduler_type": "wsd"}
    assert native["actor"]["grad_clip"] == 2.0


def test_trinity_prompt_truncation_leaves_overlong_prompts_out_and_entropy_default_is_accepted():
    native, report = _native({"model": {"enable_prompt_truncation": True}, "algorithm": {"entropy_loss_fn": "default"}}, "trinity")
    assert native["data"]["filter_overlong_prompts"] is True
    assert report.entry("algorithm.entropy_loss_fn").status == "dropped"
    _, report = _native({"model": {"enable_prompt_truncation": False}, "algorithm": {"entropy_loss_fn": "mix"}}, "trinity")
    assert {e.key for e in report.refused} == {"model.enable_prompt_truncation", "algorithm.entropy_loss_fn"}
