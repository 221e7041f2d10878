"""ROLL's WorkerConfig fields that no ROLL worker reads are dropped at any value, naming why, and a
trained role's Adam betas translate (issue 18, item 3). `benchmarks/key_homes.py --roll CHECKOUT`
counts what of ROLL's RLVRConfig still has no home."""

from __future__ import annotations

import pytest

from nested_keys import nested
from posttrain.config.dialects import translate

BASE = {"pretrain": "m", "rollout_batch_size": 8, "actor_train": {"model_args": {"model_name_or_path": "m"}}, "actor_infer": {}}
UNKNOWN = "not a ROLL key the schema knows"


def _entry(raw: dict, key: str):
    _, report = translate({**BASE, **raw}, "roll")
    return report.entry(key)


@pytest.mark.parametrize(("section", "value"), [
    ("model_args", {"model_name_or_path": "another", "dtype": "fp16", "lora_rank": 8}),
    ("training_args", {"learning_rate": 1.0, "bf16": False, "per_device_train_batch_size": 64}),
    ("strategy_args", {"strategy_name": "megatron_infer"}),
    ("sequence_packing_args", {"algorithm": "load_balance"}),
    ("router_replay", {"mode": "R3"}),
    ("device_mapping", "list(range(0,8))"),
    ("infer_batch_size", 64),
    ("opd_kl_coef", 0.5),
])
def test_validation_builds_no_worker_so_its_worker_fields_are_dropped(section, value):
    entry = _entry({"validation": {section: value, "data_args": {"file_name": ["val.jsonl"]}}}, f"validation.{section}")
    assert entry.status == "dropped" and "ROLL builds no worker from validation" in entry.reason


@pytest.mark.parametrize("role", ["actor_train", "reference", "critic"])
def test_a_training_role_s_generating_args_are_read_by_nothing(role):
    entry = _entry({role: {"generating_args": {"temperature": 0.1, "max_new_tokens": 7}}}, f"{role}.generating_args")
    assert entry.status == "dropped" and f"ROLL's {role} generates nothing" in entry.reason


@pytest.mark.parametrize("role", ["actor_infer", "reference", "critic"])
def test_only_actor_train_and_validation_name_data(role):
    raw = {role: {"data_args": {"file_name": ["other.jsonl"], "prompt": "question", "messages": "chat", "template": "chatml"}}}
    for leaf in ("file_name", "prompt", "messages"):
        entry = _entry(raw, f"{role}.data_args.{leaf}")
        assert entry.status == "dropped" and f"no pipeline reads {role}.data_args" in entry.reason
    # a key with a reason of its own keeps it
    assert "read nowhere in ROLL" in _entry(raw, f"{role}.data_args.template").reason
    # the training data is still actor_train's
    native, _ = translate({**BASE, **raw, "actor_train": {**BASE["actor_train"], "data_args": {"file_name": ["train.jsonl"]}}}, "roll")
    assert native["data"]["train_files"] == ["train.jsonl"]


@pytest.mark.parametrize(("role", "section"), [("actor_train", "actor"), ("critic", "critic")])
def test_a_trained_role_s_adam_betas_are_its_optimizer_s_betas(role, section):
    def betas(**given):
        native, report = translate({**BASE, role: {**BASE.get(role, {}), "training_args": given}}, "roll")
        for key in given:
            assert report.entry(f"{role}.training_args.{key}").status == "translated"
        return native[section]["optim"]["betas"]

    assert betas(adam_beta1=0.8, adam_beta2=0.95) == [0.8, 0.95]
    assert betas(adam_beta2=0.95) == [0.9, 0.95]  # Hugging Face's default beta1 beside it
    assert betas(adam_beta1=0.5) == [0.5, 0.999]
    native, _ = translate(BASE, "roll")
    assert "betas" not in native.get(section, {}).get("optim", {})  # a file without them keeps posttrain's default


def test_no_key_of_these_groups_is_unknown():
    raw = {"validation": {"pg_variant": "x", "tag_included": ["a"], "system_envs": {"A": "1"}},
           "critic": {"generating_args": {"top_p": 0.5}, "data_args": {"id": "uid"}},
           "reference": {"data_args": {"custom_data_kwargs_func": "m:f"}}}
    _, report = translate({**BASE, **raw}, "roll")
    assert not [e.key for e in report.entries if e.status == "refused" and UNKNOWN in e.reason]


@pytest.mark.parametrize(("key", "value", "words"), [
    ("actor_infer.pg_variant", "topr", "ROLL reads it of actor_train only"),
    ("critic.topr_negative_weight", 0.5, "ROLL reads it of actor_train only"),
    ("reference.model_update_frequency", 4, "ROLL reads actor_train's only"),
    ("actor_train.tag_included", ["math"], "of the reference (a teacher) and of the reward workers only"),
    ("critic.opd_kl_coef", 0.3, "of the reference (a teacher) and of the reward workers only"),
    ("reference.apply_loss_scale", False, "ROLL's reference never trains"),
    ("actor_train.name", "policy", "the name of the role's Ray actors"),
    ("actor_infer.max_concurrency", 64, "scheduling, not the numbers"),
    ("critic.backend_timeout", 5, "posttrain's wait is cluster.rpc_timeout_s"),
    ("actor_infer.training_args.bf16", False, "engines read no training arguments"),
    ("actor_infer.use_dynamic_batching_in_infer", True, "actor_infer only generates"),
    ("actor_infer.sequence_packing_args.algorithm", "load_balance", "actor_infer only generates"),
    ("actor_infer.logits_in_fp32", False, "an option of ROLL's Megatron models"),
])
def test_role_fields_roll_reads_of_other_roles_only_are_dropped(key, value, words):
    entry = _entry(nested(key, value), key)
    assert entry.status == "dropped" and words in entry.reason


def test_an_engine_reads_only_the_path_dtype_and_lora_of_actor_infer_s_model_args():
    model_args = {"device_map": "cpu", "model_type": "trl", "ulysses_size": 2, "adapter_name_or_path": "/a"}
    for strategy in ("vllm", "sglang"):
        raw = {"actor_infer": {"strategy_args": {"strategy_name": strategy}, "model_args": model_args}}
        for name in model_args:
            entry = _entry(raw, f"actor_infer.model_args.{name}")
            assert entry.status == "dropped" and f"ROLL's {strategy} engine reads model_name_or_path" in entry.reason
    # hf_infer builds a Hugging Face model, which reads them: not dropped on that ground
    raw = {"actor_infer": {"strategy_args": {"strategy_name": "hf_infer"}, "model_args": {"device_map": "cpu"}}}
    assert "engine reads model_name_or_path" not in (_entry(raw, "actor_infer.model_args.device_map").reason or "")


def test_roll_s_clip_range_is_posttrain_s_asymmetric_clip():
    def clip(**keys):
        native, report = translate({**BASE, **keys}, "roll")
        actor = native.get("actor", {})
        return actor.get("clip_ratio_low"), actor.get("clip_ratio_high"), report

    low, high, _ = clip(use_pg_clip_range=True, pg_clip_low=0.1, pg_clip_high=0.28)
    assert (low, high) == (0.1, 0.28)  # ROLL: clamp(ratio, 1 - pg_clip_low, 1 + pg_clip_high)
    low, high, report = clip(use_pg_clip_range=True, pg_clip_high=0.28, pg_clip=0.3)
    assert (low, high) == (0.2, 0.28)  # an unset bound is ROLL's default 0.2, not pg_clip
    low, high, report = clip(use_pg_clip_range=False, pg_clip_low=0.1, pg_clip_high=0.28)
    assert (low, high) == (None, None)
    assert all(report.entry(k).status == "dropped" for k in ("use_pg_clip_range", "pg_clip_low", "pg_clip_high"))
    # a PG worker's cispo clips its weights with its own epsilons: the range is not read
    worker = {"actor_train": {**BASE["actor_train"], "worker_cls": "roll.pipeline.rlvr.actor_pg_worker.ActorPGWorker",
                              "pg_variant": "cispo"}}
    low, high, report = clip(**worker, use_pg_clip_range=True, pg_clip_low=0.1)
    assert (low, high) == (0.1, 0.1)  # cispo's own epsilons (ROLL's defaults)
    assert "pg_variant cispo does not clip with PPO's range" in report.entry("pg_clip_low").reason
    _, _, report = clip(use_pg_clip_range="yes")
    assert report.entry("use_pg_clip_range").status == "refused"


def test_a_pg_variant_s_options_without_a_pg_worker_are_read_by_nothing():
    entry = _entry({"actor_train": {**BASE["actor_train"], "topr_positive_weight": 2.0}}, "actor_train.topr_positive_weight")
    assert entry.status == "dropped" and "read only by ROLL's policy-gradient workers" in entry.reason


def test_pipeline_keys_roll_declares_and_reads_nowhere_or_for_diagnostics_only_are_dropped():
    for key, value, words in [("val_greedy", True, "read nowhere in ROLL's code"), ("mask_type", "all", "read nowhere in ROLL's code"),
                              ("minibatch_data_iter_num", 4, "read nowhere in ROLL's code"),
                              ("report_length_and_rewards", True, "a diagnostic"), ("otlp_output_dir", "/tmp/o", "OpenTelemetry"),
                              ("enable_reference", True, "posttrain runs the reference exactly when")]:
        entry = _entry({key: value}, key)
        assert entry.status == "dropped" and words in entry.reason, key


def test_roll_s_weight_update_buffer_and_checkpoint_count_translate():
    native, _ = translate({**BASE, "model_update_buffer_size_mb": 256, "max_ckpt_to_keep": 2}, "roll")
    assert native["rollout"]["update_weights_bucket_megabytes"] == 256
    assert native["trainer"]["max_actor_ckpt_to_keep"] == native["trainer"]["max_critic_ckpt_to_keep"] == 2
    native, report = translate({**BASE, "max_ckpt_to_keep": 0}, "roll")
    assert report.entry("max_ckpt_to_keep").status == "dropped" and "max_actor_ckpt_to_keep" not in native.get("trainer", {})


@pytest.mark.parametrize(("key", "value", "words"), [
    ("actor_train.training_args.max_steps", 7, "set_max_steps"),
    ("critic.training_args.output_dir", "/o", "top-level output_dir"),
    ("reference.training_args.save_hf_model", True, "Hugging Face copy"),
    ("actor_train.num_gpus_per_worker", 4, "forces it to 1 for a training strategy"),
])
def test_training_arguments_roll_overwrites_or_reads_for_files_only_are_dropped(key, value, words):
    entry = _entry(nested(key, value), key)
    assert entry.status == "dropped" and words in entry.reason


@pytest.mark.parametrize(("role", "field", "words"), [
    ("actor_infer", "max_length", "drop max_length whenever max_new_tokens is positive"),
    ("validation", "max_length", "val_sequence_length - val_prompt_length"),
    ("actor_infer", "length_penalty", "beam search only"),
    ("validation", "logprobs", "the sampled token's"),
])
def test_generating_args_the_engines_do_not_read_are_dropped(role, field, words):
    entry = _entry(nested(f"{role}.generating_args.{field}", 3), f"{role}.generating_args.{field}")
    assert entry.status == "dropped" and words in entry.reason


def test_validation_samples_with_its_own_repetition_penalty_as_roll_does():
    """ROLL's validation generates with validation.generating_args, whose repetition_penalty defaults
    to 1.0 whatever actor_infer's is."""
    def val(raw):
        return translate({**BASE, **raw}, "roll")[0]["rollout"]["val_kwargs"].get("repetition_penalty")

    trained = {"actor_infer": {"generating_args": {"repetition_penalty": 1.1}}}
    assert val({**trained, "validation": {"generating_args": {"repetition_penalty": 1.3}}}) == 1.3
    assert val({**trained, "validation": {"generating_args": {}}}) == 1.0  # ROLL's default, not the rollout's 1.1
    assert val({"validation": {"generating_args": {}}}) is None  # the same 1.0 either way: nothing to set


def test_forcing_old_logprobs_off_is_refused_and_false_dropped():
    assert _entry({"force_disable_old_logprobs_recompute": False}, "force_disable_old_logprobs_recompute").status == "dropped"
    forced = _entry({"force_disable_old_logprobs_recompute": True}, "force_disable_old_logprobs_recompute")
    assert forced.status == "refused" and "policy at the step's start" in forced.reason


@pytest.mark.parametrize("field", ["source", "min_difficulty", "max_difficulty", "num_samples"])
def test_the_dataset_filter_roll_reads_nowhere_is_dropped(field):
    entry = _entry({"dataset_filter": {field: 0.5}}, f"dataset_filter.{field}")
    assert entry.status == "dropped" and "read by none of its pipelines" in entry.reason


DISTILL = {"student": {"model_args": {"model_name_or_path": "s"}}, "teacher": {"model_args": {"model_name_or_path": "t"}}}


@pytest.mark.parametrize("key", ["is_offload_states", "is_offload_optimizer_states_in_train_step"])
def test_the_offload_switches_are_read_only_by_the_distillation_pipeline(key):
    for extra in ({}, {"beta": 0.1}):  # RLVR, DPO: read by nothing, at any value
        entry = _entry({key: True, **extra}, key)
        assert entry.status == "dropped" and entry.reason.startswith("read only by ROLL's distillation pipelines")
    _, report = translate({key: True, **DISTILL}, "roll")
    assert report.entry(key).status == "refused" and "between its phases" in report.entry(key).reason
    _, report = translate({key: False, **DISTILL}, "roll")
    assert report.entry(key).status == "dropped"
