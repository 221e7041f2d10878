"""ROLL's per-role template and attention keys: dropped where ROLL reads them nowhere, kept to the
policy's value where ROLL builds a Hugging Face model with them (posttrain.config.dialects.roll_roles)."""

from __future__ import annotations

import pytest

from posttrain.config.dialects import translate

TRAIN = {"actor_train": {"data_args": {"template": "qwen2_5"}, "model_args": {"attn_implementation": "sdpa"}}}


@pytest.mark.parametrize("role", ["actor_infer", "validation", "critic", "reference"])
def test_another_role_s_template_is_read_nowhere_in_roll_whatever_its_value(role):
    for value in ("qwen2_5", "chatml"):
        native, report = translate({**TRAIN, role: {"data_args": {"template": value}}}, "roll")
        entry = report.entry(f"{role}.data_args.template")
        assert entry.status == "dropped" and "read nowhere in ROLL" in entry.reason
        assert native["data"]["chat_template_name"] == "qwen2_5"  # the training role's template renders every prompt


@pytest.mark.parametrize(("role", "strategy", "value", "status", "words"), [
    ("actor_infer", "vllm", "fa2", "dropped", "vllm engine is built from the model path"),
    ("actor_infer", "sglang", "fa2", "dropped", "sglang engine"),
    ("reference", "megatron_infer", "fa2", "dropped", "Megatron model with its own attention"),
    ("actor_infer", "hf_infer", "sdpa", "dropped", "they agree"),
    ("actor_infer", "hf_infer", "fa2", "refused", "every role runs the policy's attention kernel"),
    ("reference", "hf_infer", "fa2", "refused", "every role runs the policy's attention kernel"),
])
def test_a_role_s_attention_kernel_counts_only_where_roll_builds_a_hugging_face_model(role, strategy, value, status, words):
    raw = {**TRAIN, role: {"model_args": {"attn_implementation": value}, "strategy_args": {"strategy_name": strategy}}}
    _, report = translate(raw, "roll")
    entry = report.entry(f"{role}.model_args.attn_implementation")
    assert entry.status == status and words in entry.reason


@pytest.mark.parametrize("key", ["actor_train.data_args.template", "global_template"])
def test_an_agentic_file_s_template_is_dropped_as_roll_s_agentic_pipeline_reads_none(key):
    head, _, leaf = key.rpartition(".")
    raw = {"train_env_manager": {"group_size": 2}}
    if head:
        raw["actor_train"] = {"data_args": {leaf: "qwen3_coder"}}  # a name posttrain has no template for
    else:
        raw[key] = "qwen3_coder"
    native, report = translate(raw, "roll")
    entry = report.entry(key)
    assert entry.status == "dropped" and "tokenizer's own chat template" in entry.reason
    assert "chat_template_name" not in native.get("data", {})
    native, _ = translate({"actor_train": {"data_args": {"template": "qwen3"}}}, "roll")  # an RLVR file reads it
    assert native["data"]["chat_template_name"] == "qwen3"


def test_every_role_s_environment_variables_join_the_shared_processes_unless_two_disagree():
    # agent_val_rock_swe.yaml: the pipeline's variable and the same install command for both env managers
    raw = {"system_envs": {"USE_MODELSCOPE": "1"}, "actor_train": {"system_envs": {"NCCL_DEBUG": "INFO", "USE_MODELSCOPE": 1}},
           "train_env_manager": {"system_envs": {"ROCK_CMD": "wget x"}}, "val_env_manager": {"system_envs": {"ROCK_CMD": "wget x"}}}
    native, report = translate(raw, "roll")
    assert native["cluster"]["env_vars"] == {"USE_MODELSCOPE": "1", "NCCL_DEBUG": "INFO", "ROCK_CMD": "wget x"}
    assert not report.refused and report.entry("val_env_manager.system_envs").status == "translated"
    # the pipeline's value reaches the reference (ROLL fills a role's missing variables), which the
    # actor overrides: two values in processes posttrain's roles share
    native, report = translate({"system_envs": {"A": "1", "B": "2"}, "actor_train": {"system_envs": {"A": "0"}},
                                "val_env_manager": {"system_envs": {"B": "3"}}}, "roll")
    assert {e.key for e in report.refused} == {"system_envs.A", "actor_train.system_envs.A", "system_envs.B", "val_env_manager.system_envs.B"}
    assert "give A different values (system_envs: '1', actor_train.system_envs: '0', actor_infer.system_envs: '1'" in report.entry("actor_train.system_envs.A").reason
    assert native.get("cluster") is None


def test_the_critic_s_model_type_is_posttrain_s_value_model_or_refused():
    from posttrain.config.dialects import translate

    _, report = translate({"critic": {"model_args": {"model_type": "auto_token_classification"}}}, "roll")
    assert report.entry("critic.model_args.model_type").status == "dropped"
    _, report = translate({"critic": {"model_args": {"model_type": "trl"}}}, "roll")
    assert "dropout" in report.entry("critic.model_args.model_type").reason
    _, report = translate({"critic": {"model_args": {"model_type": "auto_token_classification", "num_labels": 2}}}, "roll")
    assert report.entry("critic.model_args.model_type").status == "refused"


@pytest.mark.parametrize("role", ["actor_train", "actor_infer", "reference", "critic"])
def test_offload_nccl_is_dropped_because_roll_forces_it_false_for_every_worker(role):
    for value in (True, False):
        native, report = translate({**TRAIN, role: {**TRAIN.get(role, {}), "offload_nccl": value}}, "roll")
        entry = report.entry(f"{role}.offload_nccl")
        assert entry.status == "dropped" and "sets offload_nccl to false for every worker" in entry.reason
        assert not report.refused
