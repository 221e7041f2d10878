"""`posttrain smoke` on agentic configs: env managers shrink to one small group, the prompt gets room
for the tiny tokenizer, and a flash-attention kernel the machine lacks becomes sdpa."""

from __future__ import annotations

import importlib.util

import pytest

from posttrain.trainer import smoke
from posttrain.trainer.smoke_envs import PROMPT_LENGTH, shrink_env_managers


def test_env_managers_shrink_to_one_group_of_two():
    native = {"env": {"train_env_manager": {"tags": ["A", "B"], "num_env_groups": 128, "group_size": 8, "num_groups_partition": [64, 64]},
                      "val_env_manager": {"tags": ["A"], "num_env_groups": 1, "group_size": 1}},
              "data": {"max_prompt_length": 512}}
    lines = shrink_env_managers(native)
    train, val = native["env"]["train_env_manager"], native["env"]["val_env_manager"]
    assert (train["num_env_groups"], train["group_size"], "num_groups_partition" in train) == (1, 2, False)
    assert (val["num_env_groups"], val["group_size"]) == (1, 1)  # already small: unchanged, no line
    assert native["data"]["max_prompt_length"] == PROMPT_LENGTH
    assert lines[:3] == ["env.train_env_manager.num_env_groups: 128 -> 1", "env.train_env_manager.group_size: 8 -> 2",
                         "env.train_env_manager.num_groups_partition: [64, 64] -> left out (the first tag plays the group)"]
    assert len(lines) == 4 and shrink_env_managers({"data": {}}) == []  # no env section: nothing to do


def test_a_manager_of_episode_file_rows_whose_files_are_elsewhere_plays_one_group():
    # Trinity-RFT's frozen_lake example: its evaluation taskset's rows (one group each) are on the cluster's disk
    entries = {"L": {"env_type": "trinity_frozen_lake"}, "F": {"env_type": "trinity_frozen_lake", "episode_files": ["lakes.jsonl"]}}
    native = {"env": {"custom_envs": entries, "val_env_manager": {"tags": ["L"], "num_env_groups": 0, "group_size": 1}}, "data": {}}
    lines = shrink_env_managers(native)
    assert native["env"]["val_env_manager"]["num_env_groups"] == 1 and lines[0].startswith("env.val_env_manager.num_env_groups: 0 -> 1")
    here = {"env": {"custom_envs": entries, "val_env_manager": {"tags": ["F"], "num_env_groups": 0, "group_size": 1}}, "data": {}}
    shrink_env_managers(here)
    assert here["env"]["val_env_manager"]["num_env_groups"] == 0  # files it has: one group per row, as the user's run


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here: fa2 stays")
def test_flash_attention_becomes_sdpa_without_flash_attn():
    native = {"model": {"attn_implementation": "fa2"}}
    assert "model.attn_implementation: fa2 -> sdpa (no flash-attn here)" in smoke._machine(native)
    assert native["model"]["attn_implementation"] == "sdpa"
    eager = {"model": {"attn_implementation": "eager"}}
    smoke._machine(eager)
    assert eager["model"]["attn_implementation"] == "eager"


def test_an_entry_without_its_taskset_plays_its_classs_stand_in_rows(tmp_path):
    import json

    from posttrain.trainer.smoke_envs import local_episode_files

    here = tmp_path / "lakes.jsonl"
    here.write_text('{"seed": 1}\n')
    entries = {"S": {"env_type": "trinity_sciworld", "episode_columns": {"task_desc": "question"}},  # the translation left the path out
               "M": {"env_type": "trinity_sciworld", "episode_files": ["/cluster/sciworld/train.jsonl"]},
               "N": {"env_type": "trinity_sciworld", "env_config": {"task_desc": "{}"}},  # its episode is in env_config
               "L": {"env_type": "trinity_frozen_lake", "episode_files": ["/cluster/lakes.jsonl"]},  # no stand-in rows of its own
               "H": {"env_type": "trinity_sciworld", "episode_files": [str(here)]}}
    lines = local_episode_files({"env": {"custom_envs": entries}}, tmp_path)
    assert lines == [f"env.custom_envs.S.episode_files: None -> {tmp_path}/env_S_episodes.jsonl (2 stand-in rows of trinity_sciworld: "
                     "the taskset is not on this machine)",
                     f"env.custom_envs.M.episode_files: ['/cluster/sciworld/train.jsonl'] -> {tmp_path}/env_M_episodes.jsonl (2 stand-in "
                     "rows of trinity_sciworld: the taskset is not on this machine)"]
    rows = [json.loads(line) for line in (tmp_path / "env_S_episodes.jsonl").read_text().splitlines()]
    # real tasks, under the column the entry reads
    assert [json.loads(r["question"])["task_name"] for r in rows] == ["find-living-thing", "find-plant"]
    assert "episode_files" not in entries["N"] and entries["L"]["episode_files"] == ["/cluster/lakes.jsonl"]
    assert entries["H"]["episode_files"] == [str(here)]
