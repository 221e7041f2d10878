"""Trinity-RFT keys its config validator overwrites, or that nothing reads, are dropped at any value
with the reason (issue 18, item 3). `benchmarks/key_homes.py --trinity CHECKOUT` counts what of
Trinity-RFT's Config still has no home."""

from __future__ import annotations

import pytest

from nested_keys import nested
from posttrain.config.dialects import translate

BASE = {"mode": "both", "algorithm": {"algorithm_type": "grpo"}, "model": {"model_path": "m"}}


def _entry(raw: dict, key: str):
    _, report = translate({**BASE, **raw}, "trinity")
    return report.entry(key)


@pytest.mark.parametrize(("key", "value", "words"), [
    ("buffer.explorer_output", {"name": "out", "storage_type": "sql"}, "read nowhere"),
    ("buffer.tokenizer_path", "/t", "read nowhere"),
    ("buffer.cache_dir", "/c", "validator sets it itself"),
    ("checkpoint_job_dir", "/j", "validator sets it itself"),
    ("buffer.explorer_input.taskset.batch_size", 3, "validator sets it itself"),
    ("buffer.trainer_input.experience_buffer.schema_type", "dpo", "validator sets it itself"),
    ("synchronizer.explorer_world_size", 4, "validator sets it itself"),
    ("synchronizer.ray_namespace", "ns", "Ray namespace"),
    ("buffer.trainer_input.experience_buffer.max_retry_times", 9, "retries"),
    ("ignore_validator_suggestions", True, "memory-use advice"),
    ("explorer.runner_num", 4, "deprecated"),
    ("explorer.concurrent_mode", "asynchronous", "scheduling, not what is sampled"),
    ("monitor.detailed_stats", True, "display only"),
])
def test_keys_trinity_overwrites_or_never_reads_are_dropped(key, value, words):
    raw = nested(key, value)
    if key.startswith("buffer.explorer_input.taskset."):
        raw["buffer"]["explorer_input"]["taskset"]["path"] = "tasks.jsonl"
    entry = _entry(raw, key)
    assert entry.status == "dropped" and words in entry.reason


def test_the_validator_s_gpu_counts_are_dropped_and_a_train_mode_s_held_back_devices_refused():
    for key in ("cluster.total_gpu_num", "cluster.trainer_gpu_num", "cluster.rollout_gpu_num"):
        assert _entry(nested(key, 6), key).status == "dropped"
    _, report = translate({**BASE, "mode": "train", "cluster": {"rollout_gpu_num": 2}}, "trinity")
    entry = report.entry("cluster.rollout_gpu_num")
    assert entry.status == "refused" and "takes these 2 devices from its trainer" in entry.reason


def test_checkpoint_count_trust_remote_code_and_clip_grad_translate():
    native, _ = translate({**BASE, "trainer": {"max_checkpoints_to_keep": 3}, "model": {**BASE["model"], "trust_remote_code": True},
                           "algorithm": {**BASE["algorithm"], "optimizer": {"clip_grad": 0.5}}}, "trinity")
    assert native["trainer"]["max_actor_ckpt_to_keep"] == native["trainer"]["max_critic_ckpt_to_keep"] == 3
    assert native["model"]["trust_remote_code"] is True
    assert native["actor"]["grad_clip"] == 0.5
    # two different clips are refused, naming both
    _, report = translate({**BASE, "trainer": {"grad_clip": 0.3}, "algorithm": {**BASE["algorithm"], "optimizer": {"clip_grad": 0.5}}},
                          "trinity")
    assert any(e.status == "refused" and "conflicts with" in e.reason for e in report.entries)


def test_trinity_s_adam_is_adamw():
    def optimizer(value):
        native, report = translate({**BASE, "algorithm": {**BASE["algorithm"], "optimizer": {"optimizer_type": value}}}, "trinity")
        return native.get("actor", {}).get("optim", {}).get("optimizer"), report.entry("algorithm.optimizer.optimizer_type")

    assert optimizer("adam")[0] == optimizer("adamw")[0] == "adamw"  # its FSDP trainers map both to AdamW
    assert optimizer("sgd")[0] == "sgd"
    name, entry = optimizer("lion")
    assert name is None and entry.status == "refused" and "take adam, adamw" in entry.reason


def test_a_group_places_the_checkpoints_and_names_the_trackers_run_group():
    """Trinity-RFT keeps a grouped run's checkpoints under checkpoint_root_dir/project/group/name and
    hands the group to its wandb monitor; an empty group (its default) changes nothing."""
    native, _ = translate({**BASE, "group": "ablation", "project": "math", "name": "lr3", "checkpoint_root_dir": "/ck"}, "trinity")
    assert native["trainer"]["default_local_dir"] == "/ck/math/ablation/lr3"
    assert native["trainer"]["tracker_kwargs"] == {"group": "ablation"}
    plain, report = translate({**BASE, "group": ""}, "trinity")
    assert "default_local_dir" not in plain.get("trainer", {}) and report.entry("group").status == "dropped"
    assert translate({**BASE, "group": 3}, "trinity")[1].entry("group").status == "refused"


def test_the_deprecated_trainer_config_path_is_refused_alone_as_trinity_refuses_it():
    assert _entry({"trainer": {"trainer_config_path": "verl.yaml"}}, "trainer.trainer_config_path").status == "refused"
    beside = _entry({"trainer": {"trainer_config_path": "verl.yaml", "trainer_config": {"trainer": {"balance_batch": True}}}},
                    "trainer.trainer_config_path")
    assert beside.status == "dropped" and "ignores the path" in beside.reason
    assert _entry({"trainer": {"trainer_config_path": ""}}, "trainer.trainer_config_path").status == "dropped"


def test_model_sampling_defaults_reach_the_rollout_as_trinity_fills_them():
    """Trinity-RFT fills an unset taskset rollout_args.temperature / top_p from model.*, but not top_k
    (its rollout_args.top_k is -1, not unset, and every task request passes it)."""
    native, _ = translate({**BASE, "model": {"model_path": "m", "top_p": 0.9}}, "trinity")
    assert native["rollout"]["top_p"] == 0.9
    assert _entry({"model": {"model_path": "m", "top_k": -1}}, "model.top_k").status == "dropped"
    refused = _entry({"model": {"model_path": "m", "top_k": 20}}, "model.top_k")
    assert refused.status == "refused" and "rollout_args.top_k" in refused.reason
