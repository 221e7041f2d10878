"""data.extra_info_keys: a row's own columns reach reward code through extra_info (a rubric_judge's rubric)."""

import pytest
from data_helpers import write_rows

from posttrain.config.sections.data import DataConfig
from posttrain.data import build_rl_dataset
from posttrain.errors import DataError

RUBRIC = [{"description": "names the capital", "weight": 2}]


def test_listed_columns_are_copied_into_extra_info(tmp_path, tokenizer):
    path = write_rows(tmp_path / "rows.jsonl", [
        {"prompt": "Capital of France?", "rubric": RUBRIC, "extra_info": {"id": 1}},
        {"prompt": "Capital of Peru?"},  # no rubric column in this row: no entry
    ])
    kept = build_rl_dataset(DataConfig(extra_info_keys=["rubric"]), path, tokenizer)
    assert kept[0].extra_info == {"id": 1, "rubric": RUBRIC} and kept[1].extra_info == {}
    assert build_rl_dataset(DataConfig(), path, tokenizer)[0].extra_info == {"id": 1}  # not listed: not copied


def test_a_column_that_clashes_with_an_extra_info_key_is_refused(tmp_path, tokenizer):
    path = write_rows(tmp_path / "rows.jsonl", [{"prompt": "q", "rubric": RUBRIC, "extra_info": {"rubric": "other"}}])
    with pytest.raises(DataError, match="extra_info already has 'rubric'"):
        build_rl_dataset(DataConfig(extra_info_keys=["rubric"]), path, tokenizer)[0]
