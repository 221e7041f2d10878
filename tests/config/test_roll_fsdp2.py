"""ROLL's FSDP2 strategies load as posttrain's FSDP2 (posttrain.config.dialects.roll_fsdp2).

ROLL's fsdp2_train (actor_train, critic) and fsdp2_infer (reference) take a flat strategy_config of
torch fully_shard options; the options below are those ROLL's examples set.
"""

from __future__ import annotations

import textwrap

import pytest

from posttrain.cluster.fsdp import sharding_settings
from posttrain.config import load_config

from posttrain.config.dialects import translate

BASE = "actor_train.strategy_args.strategy_config"


def _role(options: dict, name: str = "fsdp2_train", role: str = "actor_train", devices: int = 16) -> tuple[dict, object]:
    raw = {role: {"device_mapping": f"list(range(0,{devices}))", "strategy_args": {"strategy_name": name, "strategy_config": options}}}
    return translate(raw, "roll")


def test_an_example_strategy_translates_option_by_option():
    # ROLL's qwen3-8B rlvr example: HSDP over 16 devices in groups of 8, bf16 compute, fp32 reduction
    options = {"fsdp_size": 8, "param_dtype": "bf16", "reduce_dtype": "float32", "reshard_after_forward": True,
               "offload_policy": False, "use_batched_model_update": False,
               "wrap_policy": {"transformer_layer_cls_to_wrap": "Qwen3DecoderLayer", "wrap_embeddings": True, "wrap_lm_output": True}}
    native, report = _role(options)
    assert native["actor"]["strategy"] == "fsdp2"
    assert native["actor"]["fsdp_config"] == {
        "fsdp_size": 8, "mixed_precision": {"param_dtype": "auto", "reduce_dtype": "fp32"},
        "reshard_after_forward": True, "offload_policy": False, "transformer_layer_cls_to_wrap": ["Qwen3DecoderLayer"]}
    assert not report.refused
    assert report.entry(f"{BASE}.wrap_policy.wrap_embeddings").status == "dropped"
    assert "read nowhere" in report.entry(f"{BASE}.use_batched_model_update").reason


def test_changing_each_option_changes_the_translation():
    fsdp = _role({"fsdp_size": 4, "param_dtype": "float32", "reduce_dtype": "bf16", "reshard_after_forward": False,
                  "offload_policy": True})[0]["actor"]["fsdp_config"]
    assert fsdp == {"fsdp_size": 4, "mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "bf16"},
                    "reshard_after_forward": False, "offload_policy": True}
    # fsdp_size at most 1 or at least the devices: ROLL's 1-D mesh over all of them, posttrain's -1
    for size in (1, 16, 32):
        assert _role({"fsdp_size": size})[0]["actor"]["fsdp_config"]["fsdp_size"] == -1
    # the critic and the reference (fsdp2_infer: no gradients, so reduce_dtype changes nothing)
    assert _role({"offload_policy": True}, role="critic")[0]["critic"]["fsdp_config"] == {"offload_policy": True}
    native, report = _role({"fsdp_size": 2, "reduce_dtype": "bf16"}, "fsdp2_infer", "reference", devices=8)
    assert native["ref"] == {"strategy": "fsdp2", "fsdp_config": {"fsdp_size": 2}}
    assert report.entry("reference.strategy_args.strategy_config.reduce_dtype").status == "dropped"


def test_a_roll_file_loads_and_its_settings_reach_the_sharding_backend(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "q", "ground_truth": "1"}\n' * 16)
    path = tmp_path / "rlvr.yaml"
    path.write_text(textwrap.dedent(f"""\
        pretrain: {tmp_path}/model
        rollout_batch_size: 8
        num_return_sequences_in_group: 4
        adv_estimator: grpo
        num_gpus_per_node: 4
        actor_train:
          training_args: {{learning_rate: 1.0e-5, per_device_train_batch_size: 2, gradient_accumulation_steps: 4}}
          data_args: {{file_name: [{tmp_path}/train.jsonl]}}
          device_mapping: list(range(0,4))
          strategy_args:
            strategy_name: fsdp2_train
            strategy_config:
              fsdp_size: 2
              param_dtype: float32
              reduce_dtype: bf16
              reshard_after_forward: false
              offload_policy: true
              wrap_policy: {{transformer_layer_cls_to_wrap: [LlamaDecoderLayer]}}
        actor_infer:
          generating_args: {{num_return_sequences: 4, max_new_tokens: 8}}
          strategy_args: {{strategy_name: hf_infer}}
          device_mapping: list(range(0,4))
        """))
    cfg = load_config(path, dialect="roll")
    f = cfg.actor.fsdp_config
    assert (cfg.actor.strategy, f.fsdp_size, f.mixed_precision.param_dtype) == ("fsdp2", 2, "fp32")
    s = sharding_settings(f)
    assert (s.reduce_dtype, s.offload, s.reshard_after_forward, s.wrap_classes) == ("bf16", True, False, ("LlamaDecoderLayer",))


@pytest.mark.parametrize(("options", "name", "key", "words"), [
    ({"param_dtype": "fp16"}, "fsdp2_train", "param_dtype", "loss scaling"),
    ({"reduce_dtype": "int8"}, "fsdp2_train", "reduce_dtype", "expected bf16 or float32"),
    ({"fsdp_size": 6}, "fsdp2_train", "fsdp_size", "does not divide the role's 16 devices"),
    ({"ep_size": "8"}, "fsdp2_train", "ep_size", "expected a whole number of devices"),
    ({"cpu_offload_grads": True}, "fsdp2_train", "cpu_offload_grads", "no counterpart"),
    ({"offload_policy": "cpu"}, "fsdp2_train", "offload_policy", "expected true or false"),
    ({"wrap_policy": {"transformer_layer_cls_to_wrap": [1]}}, "fsdp2_train", "wrap_policy.transformer_layer_cls_to_wrap", "module class name"),
    ({}, "fsdp2_infer", "strategy_name", "with fsdp2_train, not fsdp2_infer"),
])
def test_options_posttrain_cannot_honour_are_refused(options, name, key, words):
    _, report = _role(options, name)
    full = f"actor_train.strategy_args.{key}" if key == "strategy_name" else f"{BASE}.{key}"
    entry = report.entry(full)
    assert entry is not None and entry.status == "refused" and words in entry.reason, report.refused


def test_expert_parallelism_is_dropped_as_placement():
    # ROLL's all-to-all dispatch is dropless: the experts' placement changes no value, as for Megatron's EP
    native, report = _role({"ep_size": 8, "efsdp_size": 2, "moe_use_grouped_mm": True})
    assert not report.refused and native["actor"]["strategy"] == "fsdp2" and "fsdp_config" not in native["actor"]
    assert "dropless" in report.entry(f"{BASE}.ep_size").reason
    assert report.entry(f"{BASE}.efsdp_size").status == "dropped"


def test_moe_options_without_expert_parallelism_are_dropped():
    _, report = _role({"ep_size": 1, "efsdp_size": 4, "apply_expert_patch": True, "moe_use_grouped_mm": True,
                       "apply_tiled_mlp": True, "tiled_num_shards": 8, "wrap_policy": {"moe_experts": ["Qwen3MoeMLP"]}})
    assert not report.refused
    assert "only with expert parallelism" in report.entry(f"{BASE}.efsdp_size").reason


def test_a_token_budget_is_shared_by_the_ulysses_ranks_of_a_micro_batch():
    # ROLL's max_tokens_per_microbatch_* counts a micro-batch; posttrain's budget one device's share of it
    raw = {"actor_train": {"device_mapping": "list(range(0,8))", "use_dynamic_batching_in_train": True,
                           "max_tokens_per_microbatch_in_train": 8192, "max_tokens_per_microbatch_in_infer": 9001,
                           "strategy_args": {"strategy_name": "fsdp2_train"}, "model_args": {"ulysses_size": 2}},
           "reference": {"max_tokens_per_microbatch_in_infer": 8192}}
    native, report = translate(raw, "roll")
    assert native["actor"]["ppo_max_token_len_per_gpu"] == 4096 and native["actor"]["ulysses_sequence_parallel_size"] == 2
    assert native["rollout"]["log_prob_max_token_len_per_gpu"] == 4500  # 2 x 4500 <= 9001
    assert native["ref"]["log_prob_max_token_len_per_gpu"] == 8192  # the reference splits nothing
    assert not report.refused
