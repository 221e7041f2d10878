"""data.val_file_keys: a validation entry read with column names of its own (a benchmark's
'problem'/'answer'), beside entries that use data.prompt_key / data.response_key."""

from __future__ import annotations

import pytest
from data_helpers import write_rows

from posttrain.config.sections.data import DataConfig
from posttrain.data import build_rl_dataset
from posttrain.errors import ConfigError, DataError


def _val(tmp_path, tokenizer, keys, **cfg):
    own = write_rows(tmp_path / "aime.jsonl", [{"problem": "1+1?", "answer": "2", "prompt": "stale"}])
    plain = write_rows(tmp_path / "plain.jsonl", [{"question": "2+2?", "solution": "4"}])
    data = DataConfig(prompt_key="question", response_key="solution", val_files=[own, plain],
                      val_file_keys={own: keys} if keys is not None else {}, return_full_prompt=True, **cfg)
    return build_rl_dataset(data, data.val_files, tokenizer, split="val")


def test_an_entry_is_read_with_its_own_columns(tmp_path, tokenizer):
    ds = _val(tmp_path, tokenizer, {"prompt_key": "problem", "response_key": "answer"})
    assert [(e.full_prompt.count("1+1?"), e.ground_truth) for e in ds] == [(1, "2"), (0, "4")]
    assert "2+2?" in ds[1].full_prompt  # the other entry keeps the stage's columns


def test_without_it_the_stage_columns_are_read(tmp_path, tokenizer):
    with pytest.raises(DataError, match="no column 'question'"):
        _val(tmp_path, tokenizer, None)


def test_bad_val_file_keys_name_the_problem(tmp_path, tokenizer):
    with pytest.raises(DataError, match="no column 'query'.*val_file_keys"):
        _val(tmp_path, tokenizer, {"prompt_key": "query"})
    with pytest.raises(ConfigError, match="not column settings"):
        _val(tmp_path, tokenizer, {"prompt": "problem"})
    data = DataConfig(val_files=["a.jsonl"], val_file_keys={"b.jsonl": {"prompt_key": "x"}})
    with pytest.raises(ConfigError, match="'b.jsonl' is not an entry of data.val_files"):
        build_rl_dataset(data, data.val_files, tokenizer, split="val")


def test_val_file_keys_are_checked_when_the_config_loads(tmp_path):
    from posttrain.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("data:\n  val_file_keys:\n    aime.jsonl: {prompt_key: problem}\n")
    with pytest.raises(ConfigError, match="'aime.jsonl' is not an entry of data.val_files"):
        load_config(str(path))
