"""Trinity-RFT evaluation tasksets read their own columns (their format keys, else Trinity's defaults:
they do not inherit the training taskset's): data.val_file_keys per file where they differ."""

from __future__ import annotations

from posttrain.config.dialects import translate

_EVAL = "buffer.explorer_input.eval_tasksets"


def test_eval_tasksets_with_other_columns_get_val_file_keys():
    raw = {"buffer": {"explorer_input": {
        "taskset": {"path": "train.jsonl", "format": {"prompt_key": "question", "response_key": "ground_truth"}},
        "eval_tasksets": [{"path": "aime.jsonl", "format": {"prompt_key": "problem", "response_key": "answer"}},
                          {"path": "same.jsonl", "format": {"prompt_key": "question", "response_key": "ground_truth"}},
                          {"path": "bare.jsonl"}]}}}
    native, report = translate(raw, "trinity")
    entries = {e.key: e for e in report.entries}
    assert native["data"]["prompt_key"] == "question"  # the training taskset's, unchanged
    assert native["data"]["val_file_keys"] == {
        "aime.jsonl@test": {"prompt_key": "problem", "response_key": "answer"},
        "bare.jsonl@test": {"prompt_key": "prompt", "response_key": "response"},  # Trinity's defaults, not inherited
    }
    assert entries[f"{_EVAL}[0].format.prompt_key"].status == "translated"
    assert entries[f"{_EVAL}[1].format.prompt_key"].status == "dropped"
    assert not [e for e in report.entries if e.status == "refused"]


def test_eval_tasksets_with_the_training_columns_need_none():
    raw = {"buffer": {"explorer_input": {"taskset": {"path": "train.jsonl"}, "eval_tasksets": [{"path": "test.jsonl"}]}}}
    native, _ = translate(raw, "trinity")
    assert "val_file_keys" not in native.get("data", {})
