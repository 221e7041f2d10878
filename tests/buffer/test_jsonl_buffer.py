"""`storage_type: file`: the experience buffer as JSON-lines files, with the SQLite buffer's guarantees."""

from __future__ import annotations

import json

import pytest

from posttrain.buffer.jsonl import JsonlBuffer
from posttrain.buffer.sqlite import BufferError
from test_replay import _experience


def test_claims_release_and_evaluations_as_the_sqlite_buffer(tmp_path):
    buf = JsonlBuffer(tmp_path / "b", poll_s=0.01)
    for b in (1, 2, 3):
        buf.write(b, _experience(b - 1))
    assert buf.explored() == 3 and buf.unread_groups() == 6
    assert [buf.claim(s, 1.0).policy_step for s in (1, 2, 3)] == [0, 1, 2]
    assert buf.claimed() == [(1, 1), (2, 2), (3, 3)] and buf.unread_groups() == 0
    assert buf.release_after(1) == 2 and buf.claimed() == [(1, 1), (2, None), (3, None)]
    buf.claim(2, 1.0)
    again = JsonlBuffer(tmp_path / "b")  # another process opening the directory reads the same state
    assert again.claimed() == [(1, 1), (2, 2), (3, None)]
    buf.write_evaluation(0, {"val/x": 0.5})
    buf.report("explorer", "exploring batch 4")
    assert again.evaluations_through(3) == {0: {"val/x": 0.5}} and again.state("explorer").startswith("exploring batch 4")
    with pytest.raises(BufferError, match=r"trainer step 5 waited 0.05 s for explored batch 5, .*explorer: exploring batch 4"):
        again.claim(5, 0.05)
    line = json.loads((tmp_path / "b" / "experiences.jsonl").read_text().splitlines()[0])
    assert line["batch"] == 1 and line["scores"] == [0.0] * 4  # readable beside the base64 experience


def test_a_line_cut_by_a_crash_is_ignored_then_cut_off(tmp_path):
    buf = JsonlBuffer(tmp_path / "b")
    buf.write(1, _experience(0))
    log = tmp_path / "b" / "experiences.jsonl"
    with log.open("ab") as f:
        f.write(b'{"batch": 2, "policy_st')  # the explorer was killed mid-write
    reader = JsonlBuffer(tmp_path / "b")
    assert reader.explored() == 1  # batch 2 is not in the buffer: whole or not at all
    writer = JsonlBuffer(tmp_path / "b")  # the rerun explorer resumes after batch 1 and writes batch 2 again
    writer.write(2, _experience(1))
    assert JsonlBuffer(tmp_path / "b").explored() == 2 and reader.claim(2, 1.0).policy_step == 1
    assert all(json.loads(line) for line in log.read_text().splitlines())


def test_another_directory_or_schema_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.parquet").write_text("x")
    with pytest.raises(BufferError, match=r"a directory of other files \(train.parquet\)"):
        JsonlBuffer(tmp_path / "data")
    JsonlBuffer(tmp_path / "old")
    (tmp_path / "old" / "meta.json").write_text('{"schema": "posttrain-experience-buffer-jsonl-0"}')
    with pytest.raises(BufferError, match="of schema 'posttrain-experience-buffer-jsonl-0'"):
        JsonlBuffer(tmp_path / "old")
    (tmp_path / "file").write_text("x")
    with pytest.raises(BufferError, match="cannot create the experience buffer"):
        JsonlBuffer(tmp_path / "file" / "b")
