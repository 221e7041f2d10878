"""Rows longer than their limit are found when the dataset is built: refused under
`data.truncation: error` (file and row named), counted once otherwise (how many, which part kept)."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
import pytest
from cli_run_helpers import assert_user_error, posttrain, tiny_run, write_config
from data_helpers import chatml_ids, write_rows

from posttrain.config.sections.data import DataConfig
from posttrain.data import build_dpo_dataset, build_rl_dataset
from posttrain.errors import DataError


def test_dpo_pairs_are_held_against_max_length_side_by_side(tmp_path, tokenizer, caplog):
    rows = [{"prompt": "q", "chosen": "ok", "rejected": "no"}, {"prompt": "q", "chosen": "ok", "rejected": "far too long"}]
    path = write_rows(tmp_path / "p.jsonl", rows)
    limit = len(chatml_ids(("user", "q"), ("assistant", "ok")))
    with pytest.raises(DataError, match=rf"p.jsonl: row 1, column 'rejected': \d+ tokens after the chat template, longer than data.max_length={limit}"):
        build_dpo_dataset(DataConfig(max_length=limit), path, tokenizer)
    with caplog.at_level(logging.WARNING):
        pairs = build_dpo_dataset(DataConfig(max_length=limit, truncation="right"), path, tokenizer)
    assert len(pairs[1].rejected.input_ids) == limit
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        f"data.train_files: 1 of 2 pairs are longer than data.max_length={limit} tokens"
    ]


def test_dropping_overlong_prompts_is_counted(tmp_path, tokenizer, caplog):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "x"}, {"prompt": "x" * 40}, {"prompt": "y"}])
    limit = len(chatml_ids(("user", "x"), generation_prompt=True))
    with caplog.at_level(logging.WARNING):
        ds = build_rl_dataset(DataConfig(max_prompt_length=limit, filter_overlong_prompts=True), path, tokenizer, split="val")
    assert ds.indices == [0, 2]
    assert [r.getMessage() for r in caplog.records] == [
        f"data.val_files: dropped 1 of 3 prompts longer than data.max_prompt_length={limit} tokens (data.filter_overlong_prompts)"
    ]


def _data_with_one_long_prompt(root, row: int) -> str:
    """The sort task's train file with row `row` made far longer than max_prompt_length (32)."""
    rows = pq.read_table(root / "data" / "train.parquet").to_pylist()
    rows[row]["prompt"] = [{"role": "user", "content": "sort " * 40}]
    return write_rows(root / "long.parquet", rows)


def test_train_refuses_a_long_prompt_before_the_first_step_naming_file_and_row(tmp_path):
    overrides = tiny_run(tmp_path)
    path = _data_with_one_long_prompt(tmp_path, row=7)  # 8 rows, 4 per step, 1 step: row 7 may never be drawn
    out = posttrain("train", str(write_config(tmp_path)), *overrides, f"data.train_files={path}", cwd=tmp_path)
    assert_user_error(out, f"{path}: row 7, column 'prompt':", "longer than data.max_prompt_length=32",
                      "data.truncation to left, right or middle")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_train_with_truncation_says_once_how_many_prompts_are_cut(tmp_path):
    overrides = tiny_run(tmp_path)
    path = _data_with_one_long_prompt(tmp_path, row=2)
    out = posttrain("train", str(write_config(tmp_path)), *overrides, f"data.train_files={path}",
                    "data.truncation=middle", "trainer.total_training_steps=2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    notes = [line for line in out.stderr.splitlines() if "longer than data.max_prompt_length" in line]
    assert len(notes) == 1, out.stderr  # once for the dataset, though both steps may draw the row
    assert notes[0].startswith("data.train_files: 1 of 8 prompts are longer than data.max_prompt_length=32 tokens")
    assert notes[0].endswith("data.truncation=middle keeps the first 16 and the last 16 tokens of each")
