import json

import pytest
from data_helpers import write_rows

from posttrain.data import as_file_list, count_rows, load_files, read_rows
from posttrain.errors import DataError

ROWS = [{"prompt": "a", "answer": "1"}, {"prompt": "bb", "answer": "2"}, {"prompt": "ccc", "answer": "3"}]


@pytest.mark.parametrize("ext", ["parquet", "jsonl", "json", "csv"])
def test_every_format_reads_the_same_rows_and_counts_them(tmp_path, ext):
    path = write_rows(tmp_path / f"d.{ext}", ROWS)
    assert read_rows(path) == ROWS
    assert count_rows(path) == 3


def test_parquet_keeps_nested_chat_messages(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "hi"}], "reward_model": {"style": "rule", "ground_truth": "5"}}]
    path = write_rows(tmp_path / "d.parquet", rows)
    assert read_rows(path) == rows


def test_json_object_of_columns_and_blank_jsonl_lines(tmp_path):
    (tmp_path / "cols.json").write_text(json.dumps({"prompt": ["a", "b"], "answer": ["1", "2"]}))
    assert read_rows(str(tmp_path / "cols.json")) == [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}]
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n')
    assert read_rows(str(tmp_path / "d.jsonl")) == [{"prompt": "a"}, {"prompt": "b"}]
    assert count_rows(str(tmp_path / "d.jsonl")) == 2


def test_several_files_remember_file_and_row(tmp_path):
    a = write_rows(tmp_path / "a.jsonl", ROWS)
    b = write_rows(tmp_path / "b.parquet", ROWS[:2])
    table = load_files([a, b])
    assert len(table) == 5
    assert table.where(2) == (a, 2)
    assert table.where(3) == (b, 0)
    assert table.locate(4, "prompt") == f"{b}: row 1, column 'prompt'"


def test_one_path_or_a_list_and_dataset_dir():
    assert as_file_list("x.jsonl") == ["x.jsonl"]
    assert as_file_list(["x.jsonl", "/abs/y.csv"], "data") == ["data/x.jsonl", "/abs/y.csv"]
    assert as_file_list(None) == []


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.parquet")
    with pytest.raises(DataError, match=f"^{path}: data file not found; check the path"):
        load_files(path)


def test_unsupported_extension(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("hi")
    with pytest.raises(DataError, match=r"d.txt: unsupported data file type '.txt'; use one of .parquet, .jsonl, .json, .csv"):
        read_rows(str(path))


def test_empty_file_and_empty_list(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("")
    with pytest.raises(DataError, match=r"d.jsonl: no rows \(from data.val_files\); a data file needs at least one row"):
        load_files(str(path), setting="data.val_files")
    with pytest.raises(DataError, match=r"^data.train_files is empty"):
        load_files([])


def test_bad_json_line_is_named(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(DataError, match=r"d.jsonl: line 2 is not valid JSON"):
        read_rows(str(path))


def test_row_that_is_not_an_object(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('[{"prompt": "a"}, 5]')
    with pytest.raises(DataError, match=r"d.json: row 1 is a int, not an object with named columns"):
        read_rows(str(path))


def test_corrupt_parquet(tmp_path):
    path = tmp_path / "d.parquet"
    path.write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"d.parquet: not a readable parquet file"):
        read_rows(str(path))
    with pytest.raises(DataError, match=r"d.parquet: not a readable parquet file"):
        count_rows(str(path))
