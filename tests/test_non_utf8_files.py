"""Files a user writes that are not UTF-8 (a config, data, a reward function, a chat template) end
`posttrain` with one line naming the file, the byte offset and the fix, never a UnicodeDecodeError."""

from __future__ import annotations

import json

import pytest
from cli_run_helpers import assert_user_error, posttrain, tiny_run, write_config

from posttrain.errors import DataError, UserError
from posttrain.files import read_utf8

LATIN1 = "caf\xe9".encode("latin-1")  # 'café' in Latin-1: 0xe9 is not valid UTF-8 here


def fix(path, offset: int) -> list[str]:
    return [f"{path}: not UTF-8 text", f"at byte offset {offset}", "re-save the file as UTF-8"]


def test_read_utf8_names_offset_and_line_and_accepts_a_bom(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"ok\nline two " + LATIN1 + b"\n")
    with pytest.raises(DataError) as err:
        read_utf8(path, DataError)
    assert str(err.value) == (
        f"{path}: not UTF-8 text: byte 0xe9 at byte offset 15 (line 2) cannot be decoded (invalid continuation "
        "byte); re-save the file as UTF-8"
    )
    path.write_bytes(b"\xef\xbb\xbf" + "café".encode())
    assert read_utf8(path, DataError) == "café"  # a UTF-8 byte-order mark is UTF-8
    path.write_bytes("{}".encode("utf-16"))
    with pytest.raises(UserError, match=r"byte 0xff at byte offset 0 .*it looks like UTF-16\); re-save the file as UTF-8"):
        read_utf8(path, DataError)


def test_train_refuses_a_latin1_config_file(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_bytes(b"# " + LATIN1 + b"\ntrainer: {seed: 1}\n")
    out = posttrain("train", str(path), cwd=tmp_path)
    assert_user_error(out, *fix(path, 5), "(line 1)")


@pytest.mark.parametrize("ext", ["jsonl", "json", "csv"])
def test_train_refuses_latin1_data_files(tmp_path, ext):
    rows = [{"prompt": "sort: b a", "ground_truth": "a b", "data_source": "posttrain/sort"}] * 8
    if ext == "jsonl":
        text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    elif ext == "json":
        text = json.dumps(rows).encode()
    else:
        text = b"prompt,ground_truth,data_source\n" + b"sort: b a,a b,posttrain/sort\n" * 8
    data = tmp_path / f"train.{ext}"
    data.write_bytes(text + LATIN1)
    out = posttrain("train", str(write_config(tmp_path)), *tiny_run(tmp_path), f"data.train_files={data}", cwd=tmp_path)
    assert_user_error(out, *fix(data, len(text) + 3))


def test_train_refuses_a_latin1_reward_file_without_a_coding_declaration(tmp_path):
    reward = tmp_path / "reward.py"
    head = b"def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\nNAME = '"
    reward.write_bytes(head + LATIN1 + b"'\n")
    out = posttrain(
        "train", str(write_config(tmp_path)), *tiny_run(tmp_path), f"reward.custom_reward_function.path={reward}",
        cwd=tmp_path,
    )
    assert_user_error(out, *fix(reward, len(head) + 3), "(line 3)")


def test_a_reward_file_declaring_its_encoding_is_read_in_it(tmp_path):
    from posttrain.rewards import load_reward_function

    reward = tmp_path / "reward.py"
    reward.write_bytes(
        b"# -*- coding: latin-1 -*-\nNAME = '" + LATIN1 + b"'\n"
        b"def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return float(solution_str == NAME)\n"
    )
    fn = load_reward_function(str(reward))
    assert fn(data_source="x", solution_str="café", ground_truth=None) == 1.0


@pytest.mark.parametrize("key", ["model.chat_template_path", "data.chat_template"])
def test_train_refuses_a_latin1_chat_template_file(tmp_path, key):
    template = tmp_path / "chat.jinja"
    template.write_bytes(b"{% for m in messages %}{{ m['content'] }}{% endfor %}" + LATIN1)
    out = posttrain("train", str(write_config(tmp_path)), *tiny_run(tmp_path), f"{key}={template}", cwd=tmp_path)
    assert_user_error(out, *fix(template, 56))


@pytest.mark.parametrize("name", ["chat_template.jinja", "config.json"])
def test_train_names_the_non_utf8_file_of_a_model_directory(tmp_path, name):
    overrides = tiny_run(tmp_path)
    path = tmp_path / "model" / name
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + LATIN1)
    out = posttrain("train", str(write_config(tmp_path)), *overrides, cwd=tmp_path)
    assert_user_error(out, *fix(path, size + 3))
