"""ROLL's DeepSpeed strategies load as posttrain's FSDP2 (posttrain.config.dialects.roll_strategy).

ROLL's deepspeed_train (ZeRO stage 1-3, asserted) and deepspeed_infer (stage 3) take a DeepSpeed
config dict, usually a preset included with ``defaults`` and interpolated as
``strategy_config: ${deepspeed_zero3}``. The presets below are written for these tests.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from posttrain.cli import main
from posttrain.cluster.fsdp import sharding_settings
from posttrain.config import ConfigError, load_config
from posttrain.config.dialects import read_foreign, translate
from posttrain.models.tiny import make_tiny_model

ZERO3 = """\
deepspeed_zero3:
  train_micro_batch_size_per_gpu: auto
  bf16: {enabled: true}
  fp16: {enabled: false, initial_scale_power: 16}
  zero_optimization:
    stage: 3
    overlap_comm: true
    stage3_prefetch_bucket_size: auto
    stage3_gather_16bit_weights_on_model_save: true
"""
ZERO2 = """\
deepspeed_zero2:
  bf16: {enabled: true}
  zero_optimization: {stage: 2, reduce_bucket_size: 5.0e+8, contiguous_gradients: true}
"""
ZERO3_OFFLOAD = """\
deepspeed_zero3_cpuoffload:
  bf16: {enabled: true}
  zero_optimization:
    stage: 3
    offload_optimizer: {device: cpu, pin_memory: true}
"""


def _pipeline(tmp_path: Path, preset: str, devices: int = 2, extra: str = "") -> Path:
    """A ROLL RLVR pipeline whose actor trains with ``preset`` (included from ../config) on ``devices``."""
    (tmp_path / "config").mkdir(exist_ok=True)
    for text in (ZERO3, ZERO2, ZERO3_OFFLOAD):
        (tmp_path / "config" / f"{text.split(':')[0]}.yaml").write_text(text)
    (tmp_path / "train.jsonl").write_text('{"prompt": "q", "ground_truth": "1"}\n' * 16)
    exp = tmp_path / "exp"
    exp.mkdir(exist_ok=True)
    path = exp / "rlvr.yaml"
    path.write_text(textwrap.dedent(f"""\
        defaults:
          - ../config/deepspeed_zero2@_here_
          - ../config/deepspeed_zero3@_here_
          - ../config/deepspeed_zero3_cpuoffload@_here_
        pretrain: {tmp_path}/model
        rollout_batch_size: 8
        num_return_sequences_in_group: 4
        prompt_length: 32
        response_length: 8
        adv_estimator: grpo
        num_gpus_per_node: {devices}
        actor_train:
          training_args: {{learning_rate: 1.0e-5, per_device_train_batch_size: 2, gradient_accumulation_steps: 4}}
          data_args: {{file_name: [{tmp_path}/train.jsonl]}}
          device_mapping: list(range(0,{devices}))
          strategy_args:
            strategy_name: deepspeed_train
            strategy_config: ${{{preset}}}
        actor_infer:
          generating_args: {{num_return_sequences: 4, max_new_tokens: 8}}
          strategy_args: {{strategy_name: hf_infer}}
          device_mapping: list(range(0,{devices}))
        """) + textwrap.dedent(extra))
    return path


def test_zero3_preset_loads_plans_and_shards_fully(tmp_path, capsys):
    path = _pipeline(tmp_path, "deepspeed_zero3")
    make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4)
    assert main(["config", "plan", "--dialect", "roll", str(path)]) == 0
    assert "2 processes" in capsys.readouterr().out
    cfg = load_config(path, dialect="roll")
    assert cfg.actor.strategy == "fsdp2" and cfg.actor.fsdp_config.mixed_precision.param_dtype == "auto"  # bf16 on a GPU
    s = sharding_settings(cfg.actor.fsdp_config)
    assert (s.reshard_after_forward, s.offload) == (True, False)  # ZeRO-3: everything sharded, on the device
    report = read_foreign(path, "roll").report
    notice = report.entry("actor_train.strategy_args.strategy_name")
    assert notice.status == "translated" and "DeepSpeed ZeRO-3 runs as posttrain's FSDP2" in notice.reason
    assert report.entry("actor_train.strategy_args.strategy_config.zero_optimization.overlap_comm").status == "dropped"
    assert "no strategy_config uses" in report.entry("deepspeed_zero2.zero_optimization.stage").reason  # an unused preset


def test_zero2_keeps_gathered_layers_until_the_backward_on_several_devices(tmp_path):
    cfg = load_config(_pipeline(tmp_path, "deepspeed_zero2"), dialect="roll")
    assert sharding_settings(cfg.actor.fsdp_config).reshard_after_forward is False
    # one device: ZeRO-2 shards nothing, neither does one process (the key is dropped, not refused)
    one = load_config(_pipeline(tmp_path, "deepspeed_zero2", devices=1), dialect="roll")
    assert one.actor.fsdp_config.reshard_after_forward is True


def test_cpu_offload_becomes_fsdp2_cpu_offload(tmp_path):
    cfg = load_config(_pipeline(tmp_path, "deepspeed_zero3_cpuoffload"), dialect="roll")
    assert cfg.actor.fsdp_config.optimizer_offload is True and sharding_settings(cfg.actor.fsdp_config).offload is True


def _actor(options: dict, name: str = "deepspeed_train", role: str = "actor_train") -> tuple[dict, object]:
    raw = {role: {"device_mapping": "list(range(0,4))", "strategy_args": {"strategy_name": name, "strategy_config": options}}}
    return translate(raw, "roll")


def test_stages_offload_and_precision_translate_per_deepspeed():
    native, report = _actor({"zero_optimization": {"stage": 1}})
    assert native["actor"]["fsdp_config"] == {"reshard_after_forward": False, "mixed_precision": {"param_dtype": "fp32"}}
    assert "DeepSpeed's default" in report.entry("actor_train.strategy_args.strategy_config.bf16.enabled").reason
    # DeepSpeed offloads parameters only at stage 3
    native, report = _actor({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "none"}}})
    assert "param_offload" not in native["actor"]["fsdp_config"] and "optimizer_offload" not in native["actor"]["fsdp_config"]
    assert report.entry("actor_train.strategy_args.strategy_config.zero_optimization.offload_param.device").status == "dropped"
    native, _ = _actor({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})
    assert native["actor"]["fsdp_config"]["param_offload"] is True
    native, _ = _actor({"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}, role="critic")
    assert native["critic"] == {"strategy": "fsdp2", "fsdp_config": {"reshard_after_forward": False}}
    # the reference: deepspeed_infer (ZeRO-3) is posttrain's FSDP2 forward
    native, report = _actor({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}, "deepspeed_infer", "reference")
    assert native["ref"] == {"strategy": "fsdp2", "fsdp_config": {"reshard_after_forward": True}}
    assert not report.refused
    _, report = _actor({"zero_optimization": {"stage": 2}}, "deepspeed_infer", "reference")
    assert "stage 3 only" in report.entry("reference.strategy_args.strategy_config.zero_optimization.stage").reason


@pytest.mark.parametrize(("options", "name", "key", "words"), [
    ({"zero_optimization": {"stage": 3}, "fp16": {"enabled": True}}, "deepspeed_train", "fp16.enabled", "loss scaling"),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}, "deepspeed_train", "zero_optimization.offload_optimizer.device", "CPU memory only"),
    ({"zero_optimization": {"stage": 3}, "activation_checkpointing": {"partition_activations": True}}, "deepspeed_train", "activation_checkpointing.partition_activations", "no counterpart"),
    ({"zero_optimization": {"stage": 3}, "gradient_accumulation_steps": 8}, "deepspeed_train", "gradient_accumulation_steps", "equals training_args"),
    ({}, "deepspeed_train", "zero_optimization.stage", "ZeRO stage 1, 2 or 3 only"),
    ({"zero_optimization": {"stage": 2}}, "deepspeed_infer", "strategy_name", "with deepspeed_train, not deepspeed_infer"),
    ({"zero_optimization": {"stage": 3}}, "diffusion_deepspeed_train", "strategy_name", "to which ROLL's DeepSpeed, FSDP2 and Megatron strategies translate"),
])
def test_options_posttrain_cannot_honour_are_refused(options, name, key, words):
    _, report = _actor(options, name)
    full = f"actor_train.strategy_args.{key}" if key == "strategy_name" else f"actor_train.strategy_args.strategy_config.{key}"
    entry = report.entry(full)
    assert entry is not None and entry.status == "refused" and words in entry.reason, report.refused


def test_refusals_name_the_key_and_a_mismatched_strategy_stays_refused(tmp_path):
    path = _pipeline(tmp_path, "deepspeed_zero3", extra="reference:\n  strategy_args: {strategy_name: megatron_train}\n")
    (tmp_path / "config" / "deepspeed_zero3.yaml").write_text(ZERO3.replace("enabled: false", "enabled: true"))
    with pytest.raises(ConfigError) as err:
        load_config(path, dialect="roll")
    text = str(err.value)
    assert "actor_train.strategy_args.strategy_config.fp16.enabled (posttrain: " in text and "loss scaling" in text
    assert "initial_scale_power" not in text  # fp16's own options follow fp16.enabled: one refusal
    assert "reference.strategy_args.strategy_name" in text and "ROLL runs reference with megatron_infer, not megatron_train" in text


def test_a_missing_deepspeed_preset_says_where_it_went(tmp_path):
    path = _pipeline(tmp_path, "deepspeed_zero3")
    (tmp_path / "config" / "deepspeed_zero2.yaml").unlink()
    with pytest.raises(ConfigError, match=r"deepspeed_zero2.yaml not found .*ROLL v0.3.0 removed its DeepSpeed presets"):
        load_config(path, dialect="roll")


def test_an_llm_judge_on_deepspeed_infer_runs_on_the_hf_engine():
    judge = "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker"
    raw = {"rewards": {"judge": {"worker_cls": judge, "strategy_args": {"strategy_name": "deepspeed_infer", "strategy_config": {"zero_optimization": {"stage": 3}}}}}}
    _, report = translate(raw, "roll")
    assert report.entry("rewards.judge.strategy_args").status == "dropped"
    raw["rewards"]["judge"]["strategy_args"] = {"strategy_name": "megatron_infer"}
    assert translate(raw, "roll")[1].entry("rewards.judge.strategy_args").status == "refused"
