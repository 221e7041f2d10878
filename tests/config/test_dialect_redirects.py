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


def test_trinity_prompt_truncation_leaves_overlong_prompts_out_and_entropy_default_is_accepted():
    native, report = _native({"model": {"enable_prompt_truncation": True}, "algorithm": {"entropy_loss_fn": "default"}}, "trinity")
    assert native["data"]["filter_overlong_prompts"] is True
    assert report.entry("algorithm.entropy_loss_fn").status == "dropped"
    # mix puts the bonus on explored rows only: refused when it has a weight (posttrain's covers expert rows too)
    _, report = _native({"model": {"enable_prompt_truncation": False},
                         "algorithm": {"entropy_loss_fn": "mix", "entropy_loss_fn_args": {"entropy_coef": 0.01}}}, "trinity")
    assert {e.key for e in report.refused} == {"model.enable_prompt_truncation", "algorithm.entropy_loss_fn"}


# ---- the frameworks' own defaults and placeholders ------------------------------------------------

import textwrap  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from posttrain.config import load_config  # noqa: E402
from posttrain.config.dialects import read_foreign  # noqa: E402
from posttrain.config.dialects.verl_launch import DEFAULTS_FILE  # noqa: E402
from posttrain.errors import ConfigError  # noqa: E402

TEMPLATE = Path(__file__).parent / "reference_configs" / "trinity_verl_trainer_template.yaml"


def test_verl_s_complete_default_trainer_config_loads_unmodified(tmp_path):
    path = shutil.copy(DEFAULTS_FILE, tmp_path / "ppo_trainer.yaml")
    foreign = read_foreign(path)
    assert foreign.report.refused == []
    optimizer_impl = foreign.report.entry("actor_rollout_ref.actor.optim.optimizer_impl")
    assert optimizer_impl.status == "dropped" and "verl's own default ('torch.optim')" in optimizer_impl.reason
    cfg = load_config(path)
    assert cfg.actor.optim.lr == 1e-6 and cfg.rollout.prompt_length == cfg.data.max_prompt_length == 512
    assert cfg.actor.use_torch_compile is False  # 8 worker processes: verl's default true cannot act, so it is left out


def test_a_value_other_than_verl_s_default_is_still_refused(tmp_path):
    _, report = translate({"actor_rollout_ref": {"actor": {"optim": {"optimizer_impl": "bitsandbytes.optim", "total_training_steps": 99},
                                                            "fsdp_config": {"seed": 7}}}}, "verl")
    assert {e.key for e in report.refused} == {
        "actor_rollout_ref.actor.optim.optimizer_impl", "actor_rollout_ref.actor.optim.total_training_steps",
        "actor_rollout_ref.actor.fsdp_config.seed"}
    native, report = translate({"actor_rollout_ref": {"actor": {"optim": {"optimizer": "AdamW", "clip_grad": 0.5, "warmup_style": None}}}}, "verl")
    assert not report.refused and native["actor"]["optim"] == {"optimizer": "adamw"} and native["actor"]["grad_clip"] == 0.5


def test_rollout_prompt_length_is_accepted_only_as_the_prompt_limit(tmp_path):
    (tmp_path / "a.yaml").write_text("data:\n  max_prompt_length: 1024\nactor_rollout_ref:\n  rollout:\n    prompt_length: ${data.max_prompt_length}\n")
    assert load_config(tmp_path / "a.yaml").rollout.prompt_length == 1024
    (tmp_path / "b.yaml").write_text("data:\n  max_prompt_length: 1024\nactor_rollout_ref:\n  rollout:\n    prompt_length: 2048\n")
    with pytest.raises(ConfigError, match="differs from data.max_prompt_length"):
        load_config(tmp_path / "b.yaml")


def test_trinity_s_verl_trainer_template_loads_with_its_interpolations_inside_it():
    foreign = read_foreign(TEMPLATE)
    assert foreign.report.refused == []
    native = foreign.native
    # ${actor_rollout_ref.actor.use_dynamic_bsz} and friends resolve inside the inline verl config
    assert native["ref"]["log_prob_use_dynamic_bsz"] is True and native["critic"]["ppo_epochs"] == 1
    assert native["critic"]["forward_micro_batch_size_per_gpu"] == 8


def test_an_inline_trainer_config_may_name_keys_from_the_file_s_root(tmp_path):
    # Trinity-RFT resolves the whole file with OmegaConf (examples/ppo_countdown_megatron/countdown.yaml)
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""\
        mode: both
        algorithm: {algorithm_type: ppo}
        model: {model_path: /tmp/model}
        buffer: {batch_size: 4, explorer_input: {taskset: {path: org/dataset}}}
        trainer:
          trainer_config:
            actor_rollout_ref: {actor: {ppo_epochs: 3}}
            critic:
              ppo_micro_batch_size_per_gpu: 6
              forward_micro_batch_size_per_gpu: ${trainer.trainer_config.critic.ppo_micro_batch_size_per_gpu}
              ppo_epochs: ${actor_rollout_ref.actor.ppo_epochs}
              ppo_max_token_len_per_gpu: ${nowhere.at_all}
        """))
    foreign = read_foreign(tmp_path / "c.yaml")
    critic = foreign.native["critic"]
    assert critic["forward_micro_batch_size_per_gpu"] == 6 and critic["ppo_epochs"] == 3
    refused = {e.key: e.reason for e in foreign.report.refused}
    assert "cannot resolve interpolation '${nowhere.at_all}'" in refused["trainer.trainer_config.critic.ppo_max_token_len_per_gpu"]
