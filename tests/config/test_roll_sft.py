"""ROLL's SFT pipeline files load as a posttrain SFT stage (posttrain.config.dialects.roll_sft).

The files below copy the key sets of ROLL's SFT examples (qwen2.5-7B-sft_megatron,
qwen3-30BA3B-sft_fsdp2, qwen3.5-35BA3-sft_fsdp2) with small values; the real files are planned by the
corpus sweep (benchmarks/foreign_corpus.py).
"""

from __future__ import annotations

import copy

import pytest

from posttrain.config.dialects import Foreign, check, detect, translate

_FSDP2 = {"strategy_name": "fsdp2_train", "strategy_config": {
    "fsdp_size": 8, "param_dtype": "bf16", "reduce_dtype": "bf16", "offload_policy": False, "reshard_after_forward": True,
    "wrap_policy": {"wrap_embeddings": True, "wrap_lm_output": True, "transformer_layer_cls_to_wrap": ["Qwen3MoeAttention", "Qwen3MoeSparseMoeBlock"]}}}
_MEGATRON = {"strategy_name": "megatron_train", "strategy_config": {
    "tensor_model_parallel_size": 2, "sequence_parallel": True, "pipeline_model_parallel_size": 2,
    "use_distributed_optimizer": True, "context_parallel_size": 2}}


def _file(strategy: dict, ulysses: int | None = None, validation: bool = True) -> dict:
    model_args = {"dtype": "bf16", **({"ulysses_size": ulysses} if ulysses is not None else {})}
    raw = {
        "hydra": {"run": {"dir": "."}, "output_subdir": None},
        "exp_name": "sft", "seed": 42, "logging_dir": "./output/logs", "output_dir": "./output_sft",
        "system_envs": {"USE_MODELSCOPE": "1"}, "num_gpus_per_node": 8, "save_steps": 100, "logging_steps": 1,
        "eval_steps": 10, "resume_from_checkpoint": False, "sequence_length": 2048, "pretrain": "Qwen/Qwen2.5-7B",
        "prompt_key": "instruction", "query_key": "input", "response_key": "output",
        "sft_train": {
            "model_args": model_args,
            "training_args": {"num_train_epochs": 1, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 16, "learning_rate": 5.0e-6},
            "data_args": {"file_name": "data/code_alpaca_20k.json", "template": "qwen2_5", "preprocessing_num_workers": 4},
            "strategy_args": copy.deepcopy(strategy),
            "use_sequence_packing": True, "device_mapping": "list(range(0,8))", "infer_batch_size": 2,
        },
    }
    if validation:
        raw["validation"] = {"data_args": {"file_name": "data/code_alpaca_500.json", "template": "qwen2_5"}}
    return raw


def _plan(raw: dict) -> tuple[dict, object]:
    assert detect(raw) == "roll"
    native, report = translate(raw, "roll")
    assert not report.refused, [e.line() for e in report.refused]
    assert check(Foreign(None, "roll", native, report)) == []  # native validation passes: the file plans
    return native, report


@pytest.mark.parametrize("strategy, ulysses, batch", [
    (_MEGATRON, None, 2 * 16 * 1),  # 8 devices / (TP 2 x PP 2 x CP 2): one data-parallel rank
    (_FSDP2, 2, 2 * 16 * 4),  # 8 devices / Ulysses 2
    (_FSDP2, 1, 2 * 16 * 8),
])
def test_each_example_shape_plans_as_an_sft_stage_with_rolls_global_batch(strategy, ulysses, batch):
    native, report = _plan(_file(strategy, ulysses))
    assert native["algorithm"]["kind"] == "sft"
    assert native["data"]["train_batch_size"] == batch
    assert native["actor"]["ppo_micro_batch_size_per_gpu"] == 2
    assert native["trainer"]["total_epochs"] == 1
    assert native["data"]["shuffle"] is False  # ROLL's SFT DataLoader reads in file order
    assert native["data"]["max_length"] == 2048
    megatron = {"decay_bias_and_norm": False} if strategy is _MEGATRON else {}  # Megatron's optimizer: no decay on biases and norms
    assert native["actor"]["optim"] == {"lr": 5.0e-6, "weight_decay": 0.0, "lr_scheduler_type": "linear", "lr_warmup_rounding": "ceil", **megatron}
    # the report names the keys as the file wrote them
    assert report.entry("sft_train.training_args.gradient_accumulation_steps").native == "data.train_batch_size"
    assert report.entry("sft_train.use_sequence_packing").status == "dropped"
    assert not [e for e in report.entries if e.key.startswith("actor_train")]


def test_changing_the_batch_keys_changes_the_batch():
    raw = _file(_FSDP2, 2)
    raw["sft_train"]["training_args"].update(per_device_train_batch_size=3, gradient_accumulation_steps=5)
    raw["sft_train"]["device_mapping"] = "list(range(0,4))"
    native, _ = _plan(raw)
    assert native["data"]["train_batch_size"] == 3 * 5 * 2  # 4 devices / Ulysses 2
    assert native["actor"]["ppo_micro_batch_size_per_gpu"] == 3
    raw["sft_train"]["device_mapping"] = "list(range(0,3))"  # 3 devices do not split into Ulysses pairs
    _, report = translate(raw, "roll")
    assert "data-parallel ranks" in report.entry("sft_train.training_args.gradient_accumulation_steps").reason
    assert report.entry("sft_train.training_args.gradient_accumulation_steps").status == "refused"


def test_rolls_defaults_fill_what_the_file_leaves_out():
    raw = _file(_FSDP2, 1)
    for key in ("prompt_key", "query_key", "response_key"):
        del raw[key]
    raw["sft_train"]["training_args"] = {"num_train_epochs": 2}
    native, report = _plan(raw)
    data = native["data"]
    assert (data["prompt_key"], data["response_key"]) == ("instruction", "output")  # SFTConfig's defaults
    assert "query_key" not in data and "system_prompt_key" not in data
    assert data["train_batch_size"] == 8 * 1 * 8  # TrainingArguments: 8 rows per device, 1 accumulation step
    assert native["trainer"]["total_epochs"] == 2
    raw["system_key"] = "sys"
    assert translate(raw, "roll")[0]["data"]["system_prompt_key"] == "sys"
    raw["sft_train"]["training_args"] = {"num_train_epochs": 1.5}
    assert translate(raw, "roll")[1].entry("sft_train.training_args.num_train_epochs").status == "refused"


def test_validation_only_with_validation_data():
    native, _ = _plan(_file(_FSDP2, 1))
    assert native["trainer"]["test_freq"] == 10 and native["trainer"]["val_before_train"] is True
    assert native["data"]["val_files"] == "data/code_alpaca_500.json" and native["data"]["val_batch_size"] == 2
    native, report = _plan(_file(_FSDP2, 1, validation=False))
    assert "val_before_train" not in native["trainer"] and "test_freq" not in native["trainer"]
    assert "does not validate" in report.entry("eval_steps").reason
    raw = _file(_FSDP2, 1)
    del raw["eval_steps"], raw["save_steps"]
    native, _ = _plan(raw)
    assert (native["trainer"]["test_freq"], native["trainer"]["save_freq"]) == (10, 50)  # ROLL's BaseConfig defaults


def test_an_rl_file_keeps_its_rules():
    # actor_train and sft_train both: not an SFT file (ROLL's SFT config has no actor_train)
    raw = _file(_FSDP2, 1)
    raw["actor_train"] = raw.pop("sft_train")
    raw["rollout_batch_size"] = 4
    for key in ("prompt_key", "query_key", "response_key"):
        del raw[key]
    native, _ = translate(raw, "roll")
    assert native.get("algorithm", {}).get("kind") != "sft"
