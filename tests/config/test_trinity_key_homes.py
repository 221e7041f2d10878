"""Trinity-RFT keys its config validator overwrites, or that nothing reads, are dropped at any value
with the reason (issue 18, item 3). `benchmarks/key_homes.py --trinity CHECKOUT` counts what of
Trinity-RFT's Config still has no home."""

from __future__ import annotations

import pytest

from posttrain.config.dialects import translate

BASE = {"mode": "both", "algorithm": {"algorithm_type": "grpo"}, "model": {"model_path": "m"}}


def _entry(raw: dict, key: str):
    _, report = translate({**BASE, **raw}, "trinity")
    return report.entry(key)


def _nested(key: str, value) -> dict:
    raw: dict = {}
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return raw


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
])
def test_keys_trinity_overwrites_or_never_reads_are_dropped(key, value, words):
    raw = _nested(key, value)
    if key.startswith("buffer.explorer_input.taskset."):
        raw["buffer"]["explorer_input"]["taskset"]["path"] = "tasks.jsonl"
    entry = _entry(raw, key)
    assert entry.status == "dropped" and words in entry.reason
