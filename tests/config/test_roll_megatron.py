"""ROLL's Megatron strategies load as posttrain's FSDP2 (posttrain.config.dialects.roll_megatron).

ROLL's megatron_train (actor_train, critic) and megatron_infer (reference) take mcore_adapter's
TrainingArguments in strategy_config; the options below are those ROLL's examples set.
"""

from __future__ import annotations

import copy

import textwrap

import pytest

from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.errors import ConfigError
from posttrain.trainer.smoke import machine_refusal

BASE = "actor_train.strategy_args.strategy_config"
REF = "reference.strategy_args.strategy_config"


def _role(options: dict, name: str = "megatron_train", role: str = "actor_train", **role_keys) -> tuple[dict, object]:
    raw = {role: {"device_mapping": "list(range(0,16))", "strategy_args": {"strategy_name": name, "strategy_config": options}, **role_keys}}
    return translate(raw, "roll")


def test_an_example_strategy_translates_option_by_option():
    # ROLL's qwen2.5-7B rlvr_megatron example (actor_train), with the options its other examples add
    options = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2,
               "expert_model_parallel_size": 1, "sequence_parallel": True, "use_distributed_optimizer": True,
               "overlap_grad_reduce": True, "recompute_granularity": "full", "bf16": True, "bias_activation_fusion": True,
               "apply_rope_fusion": True, "moe_grouped_gemm": True, "moe_token_dispatcher_type": "alltoall",
               "account_for_loss_in_pipeline_split": True, "max_grad_norm": 1.0, "additional_configs": {"moe_permute_fusion": True}}
    native, report = _role(options, model_args={"disable_gradient_checkpointing": True})
    assert not report.refused, report.refused
    assert native["actor"]["strategy"] == "fsdp2" and "fsdp_config" not in native["actor"]  # bf16: auto, the default
    # megatron_train recomputes by recompute_granularity; it does not read model_args.disable_gradient_checkpointing
    assert native["model"] == {"enable_gradient_checkpointing": True}
    assert report.entry("actor_train.model_args.disable_gradient_checkpointing").status == "dropped"
    assert "megatron_train runs as posttrain's FSDP2" in report.entry("actor_train.strategy_args.strategy_name").reason
    for sub in ("tensor_model_parallel_size", "sequence_parallel", "use_distributed_optimizer", "moe_token_dispatcher_type",
                "additional_configs.moe_permute_fusion", "max_grad_norm"):
        assert report.entry(f"{BASE}.{sub}").status == "dropped", sub
    assert "not the values" in report.entry(f"{BASE}.pipeline_model_parallel_size").reason
    assert "pipeline's max_grad_norm" in report.entry(f"{BASE}.max_grad_norm").reason


def test_context_parallelism_is_ulysses_and_drops_the_recomputation():
    native, report = _role({"context_parallel_size": 4, "recompute_granularity": "full"})
    assert native["actor"]["ulysses_sequence_parallel_size"] == 4 and "model" not in native
    assert "does not split a recomputation" in report.entry(f"{BASE}.recompute_granularity").reason
    native, _ = _role({"context_parallel_size": 2}, "megatron_infer", "reference")
    assert native["ref"]["ulysses_sequence_parallel_size"] == 2
    native, report = _role({"context_parallel_size": 1})
    assert "ulysses_sequence_parallel_size" not in native["actor"] and report.entry(f"{BASE}.context_parallel_size").status == "dropped"


@pytest.mark.parametrize(("options", "role", "checkpointing"), [
    ({"recompute_granularity": "selective", "recompute_modules": "moe,layernorm"}, "actor_train", True),
    ({"moe_layer_recompute": True}, "actor_train", True),
    ({"recompute_modules": "moe"}, "actor_train", None),  # read by Megatron only with recompute_granularity
    ({"recompute_granularity": None}, "actor_train", None),
    ({"recompute_granularity": "full"}, "critic", True),
])
def test_recomputation_is_the_trained_roles_gradient_checkpointing(options, role, checkpointing):
    native, report = _role(options, role=role)
    assert not report.refused
    got = (native.get("critic", {}).get("model", {}) if role == "critic" else native.get("model", {})).get("enable_gradient_checkpointing")
    assert got is checkpointing


def test_the_reference_recomputes_nothing():
    native, report = _role({"recompute_granularity": "full", "use_distributed_optimizer": True}, "megatron_infer", "reference")
    assert "model" not in native and not report.refused
    assert "no backward pass" in report.entry(f"{REF}.recompute_granularity").reason
    assert "builds no optimizer" in report.entry(f"{REF}.use_distributed_optimizer").reason


def test_bf16_follows_strategy_config_then_model_args_dtype():
    param_dtype = lambda native: native["actor"].get("fsdp_config", {}).get("mixed_precision", {}).get("param_dtype")  # noqa: E731
    assert param_dtype(_role({"bf16": True})[0]) is None  # auto: bf16 on a GPU
    assert param_dtype(_role({"bf16": False})[0]) == "fp32"
    assert param_dtype(_role({})[0]) is None  # ROLL's model_args.dtype default bf16 sets training_args.bf16
    assert param_dtype(_role({}, model_args={"dtype": "fp32"})[0]) == "fp32"
    assert param_dtype(_role({}, model_args={"dtype": "fp32"}, training_args={"bf16": True})[0]) is None
    _, report = _role({"fp16": True})
    assert "loss scaling" in report.entry(f"{BASE}.fp16").reason and report.entry(f"{BASE}.fp16").status == "refused"


def test_the_moe_router_loss_is_the_actors_moe_aux_loss_coef():
    # Megatron's coefficient: strategy_config's, else model_args', else the model's (posttrain's null)
    native, report = _role({"expert_model_parallel_size": 8})
    assert not report.refused and native["actor"]["moe_aux_loss_coef"] is None
    set_null = [e for e in report.entries if e.native == "actor.moe_aux_loss_coef"]
    assert [e.key for e in set_null] == ["actor_train.strategy_args.strategy_name"] and "router_aux_loss_coef" in set_null[0].reason
    assert "dropless" in report.entry(f"{BASE}.expert_model_parallel_size").reason
    native, report = _role({"moe_aux_loss_coeff": 0.002}, model_args={"moe_aux_loss_coef": 0.5})
    assert not report.refused and native["actor"]["moe_aux_loss_coef"] == 0.002
    assert "takes" in report.entry("actor_train.model_args.moe_aux_loss_coef").reason
    native, report = _role({"expert_model_parallel_size": 8}, model_args={"moe_aux_loss_coef": 0.01})
    assert native["actor"]["moe_aux_loss_coef"] == 0.01  # ROLL's model provider copies it when strategy_config has none
    native, report = _role({"expert_model_parallel_size": 8, "moe_aux_loss_coeff": 0.0})
    assert not report.refused and "moe_aux_loss_coef" not in native["actor"]
    # the critic's: critic.moe_aux_loss_coef
    native, report = _role({"moe_aux_loss_coeff": 0.001}, role="critic")
    assert not report.refused and native["critic"]["moe_aux_loss_coef"] == 0.001
    native, report = _role({"expert_model_parallel_size": 8}, role="critic")
    assert not report.refused and native["critic"]["moe_aux_loss_coef"] is None
    native, report = _role({"expert_model_parallel_size": 8, "context_parallel_size": 2})  # Ulysses sums the counts over its ranks
    assert not report.refused and native["actor"]["moe_aux_loss_coef"] is None
    # the reference trains nothing: its experts' placement is all that EP says there
    _, report = _role({"expert_model_parallel_size": 8}, "megatron_infer", "reference")
    assert not report.refused
    # ROLL's DPO pipeline: posttrain's DPO loss adds it as the actor's does (null: the model's coefficient, 0 when dense)
    native, report = translate({"beta": 0.1, "actor_train": {"strategy_args": {"strategy_name": "megatron_train", "strategy_config": {}}}}, "roll")
    assert not report.refused and native["actor"]["moe_aux_loss_coef"] is None
    native, report = translate({"beta": 0.1, "actor_train": {"strategy_args": {"strategy_name": "megatron_train",
                                                                               "strategy_config": {"expert_model_parallel_size": 8,
                                                                                                   "moe_aux_loss_coeff": 0.002}}}}, "roll")
    assert not report.refused and native["actor"]["moe_aux_loss_coef"] == 0.002
    # Megatron's router z-loss: the trained role's moe_z_loss_coef, whatever the balancing type
    native, report = _role({"moe_z_loss_coeff": 0.001})
    assert not report.refused and native["actor"]["moe_z_loss_coef"] == 0.001
    native, report = _role({"moe_z_loss_coeff": 0.002}, role="critic")
    assert not report.refused and native["critic"]["moe_z_loss_coef"] == 0.002
    _, report = _role({"moe_z_loss_coeff": "big"})
    assert "expected a number >= 0" in report.entry(f"{BASE}.moe_z_loss_coeff").reason
    _, report = _role({"moe_z_loss_coeff": 0.001}, "megatron_infer", "reference")  # the reference trains nothing
    assert report.entry("reference.strategy_args.strategy_config.moe_z_loss_coeff").status == "dropped"
    # ROLL's other strategies read no router loss: model_args' coefficient changes nothing there
    native, report = _role({}, "fsdp2_train", model_args={"moe_aux_loss_coef": 0.01})
    assert report.entry("actor_train.model_args.moe_aux_loss_coef").status == "dropped"
    assert "moe_aux_loss_coef" not in native.get("actor", {})


def test_an_moe_model_on_this_machine_is_known_from_its_config(tmp_path):
    # posttrain's distillation loss has no router term: in a distillation file expert_model_parallel_size
    # 1 says nothing; the model's config.json (a nested text config too) does
    from test_roll_distill import FILE
    model = tmp_path / "moe"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3_vl_moe", "text_config": {"num_experts": 8, "router_aux_loss_coef": 0.001}}')
    distill = copy.deepcopy(FILE)
    distill["student"]["model_args"]["model_name_or_path"] = str(model)
    distill["student"]["strategy_args"]["strategy_config"]["expert_model_parallel_size"] = 1
    entry = translate(distill, "roll")[1].entry("student.strategy_args.strategy_config.moe_aux_loss_coeff")
    assert entry.status == "refused" and "router_aux_loss_coef 0.001" in entry.reason and "distillation loss" in entry.reason
    distill["student"]["strategy_args"]["strategy_config"]["moe_aux_loss_coeff"] = 0
    assert not [e for e in translate(distill, "roll")[1].refused if "moe" in e.key]
    (model / "config.json").write_text('{"model_type": "qwen2", "num_hidden_layers": 2}')  # dense: no router
    distill["student"]["strategy_args"]["strategy_config"].pop("moe_aux_loss_coeff")
    assert not [e for e in translate(distill, "roll")[1].refused if "moe" in e.key]
    # an SFT file takes the coefficient (null: the model's when it loads)
    sft = {"sft_train": {"model_args": {"model_name_or_path": str(model)},
                         "strategy_args": {"strategy_name": "megatron_train", "strategy_config": {"expert_model_parallel_size": 4}}}}
    native, report = translate(sft, "roll")
    assert not [e for e in report.refused if "moe" in e.key] and native["actor"]["moe_aux_loss_coef"] is None


PIPELINE = """\
    pretrain: {d}/model
    rollout_batch_size: 16
    num_return_sequences_in_group: 4
    adv_estimator: grpo
    num_gpus_per_node: 8
    actor_train:
      training_args: {{learning_rate: 1.0e-6, per_device_train_batch_size: 1, gradient_accumulation_steps: 16}}
      data_args: {{file_name: [{d}/train.jsonl]}}
      device_mapping: list(range(0,16))
      model_args: {{disable_gradient_checkpointing: true, dtype: bf16}}
      strategy_args:
        strategy_name: megatron_train
        strategy_config: {{tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, context_parallel_size: {cp},
                           use_distributed_optimizer: true, recompute_granularity: full, sequence_parallel: true}}
    actor_infer:
      generating_args: {{num_return_sequences: 4, max_new_tokens: 8}}
      strategy_args: {{strategy_name: hf_infer}}
      device_mapping: list(range(0,16))
    reference:
      device_mapping: list(range(0,16))
      strategy_args:
        strategy_name: megatron_infer
        strategy_config: {{tensor_model_parallel_size: 2, context_parallel_size: {cp}}}
    """


@pytest.mark.parametrize(("cp", "prompts"), [(1, 16), (2, 8)])
def test_a_roll_megatron_file_loads_with_rolls_global_batch(tmp_path, cp, prompts):
    # ROLL's optimizer step: 1 x 16 responses on each of devices / (TP 2 x PP 2 x CP) data-parallel ranks;
    # 16 devices: 4 ranks at CP 1 (64 responses: 16 prompts of 4), 2 ranks at CP 2 (8 prompts)
    (tmp_path / "train.jsonl").write_text('{"prompt": "q", "ground_truth": "1"}\n' * 16)
    path = tmp_path / "rlvr.yaml"
    path.write_text(textwrap.dedent(PIPELINE.format(d=tmp_path, cp=cp)))
    cfg = load_config(path, dialect="roll")
    assert (cfg.actor.strategy, cfg.ref.strategy, cfg.actor.ppo_mini_batch_size) == ("fsdp2", "fsdp2", prompts)
    assert (cfg.actor.ulysses_sequence_parallel_size, cfg.ref.ulysses_sequence_parallel_size) == (cp, cp if cp > 1 else None)
    assert cfg.model.enable_gradient_checkpointing is (cp == 1)  # Ulysses keeps the activations
    assert cfg.actor.moe_aux_loss_coef is None  # the model's router_aux_loss_coef, read when it loads
    routed = PIPELINE.format(d=tmp_path, cp=cp).replace("sequence_parallel: true", "sequence_parallel: true, moe_aux_loss_coeff: 0.01")
    path.write_text(textwrap.dedent(routed))
    assert load_config(path, dialect="roll").actor.moe_aux_loss_coef == 0.01


def test_megatron_train_exempts_biases_and_norms_from_weight_decay_as_megatrons_optimizer():
    native, _ = _role({"tensor_model_parallel_size": 2})
    assert native["actor"]["optim"]["decay_bias_and_norm"] is False
    native, _ = _role({}, name="fsdp2_train")  # ROLL's FSDP2 decays every parameter
    assert "decay_bias_and_norm" not in native["actor"].get("optim", {})


def test_rolls_training_args_defaults_fill_what_an_rl_file_leaves_out():
    """ROLL's TrainingArguments: linear decay and no weight decay unless the file says otherwise."""
    native, report = _role({}, name="fsdp2_train", training_args={"learning_rate": 1e-6})
    assert (native["actor"]["optim"]["lr_scheduler_type"], native["actor"]["optim"]["weight_decay"]) == ("linear", 0.0)
    assert report.entry("actor_train.training_args.lr_scheduler_type").reason.startswith("ROLL's default")
    native, _ = _role({}, name="fsdp2_train", training_args={"lr_scheduler_type": "constant", "weight_decay": 0.01})
    assert (native["actor"]["optim"]["lr_scheduler_type"], native["actor"]["optim"]["weight_decay"]) == ("constant", 0.01)


ROLL_SCHEDULE = """\
max_steps: 500
rollout_batch_size: 64
num_return_sequences_in_group: 8
ppo_epochs: 1
actor_train:
  device_mapping: list(range(0,1))
  training_args: {per_device_train_batch_size: 1, gradient_accumulation_steps: 32, warmup_ratio: 0.0031}
  strategy_args: {strategy_name: fsdp2_train}
actor_infer:
  device_mapping: list(range(0,1))
  generating_args: {num_return_sequences: 8}
"""


def test_rolls_lr_schedule_counts_optimizer_updates_and_rounds_the_warmup_up(tmp_path):
    """ROLL sizes the actor's schedule as max_steps x rollout_batch_size x n x ppo_epochs / backward
    batch = 500 x 64 x 8 / 32 = 8000 updates (roll/configs/base_config.py set_max_steps), steps it
    after every update, and warms up ceil(0.0031 x 8000) = 25 updates (get_warmup_steps)."""
    from posttrain.config import derive, load_config

    path = tmp_path / "rlvr.yaml"
    path.write_text(ROLL_SCHEDULE)
    cfg = load_config(path, [])
    assert (cfg.actor.optim.lr_schedule_unit, cfg.actor.optim.lr_warmup_rounding) == ("update", "ceil")
    d = derive(cfg, None)
    assert (d.total_training_steps, d.actor_schedule_steps, d.actor_warmup_steps) == (500, 8000, 25)
