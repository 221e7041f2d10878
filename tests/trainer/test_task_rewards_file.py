"""explorer.task_rewards_file: an explore-only run (BOTS's reference pass-rate collection) appends one
JSON line per task, {model_version, rewards, question, truth}, whose rewards are the scores the
buffer holds for that task's responses; BOTS's join of the file into the dataset reads it as is."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posttrain.buffer.sqlite import ExperienceBuffer
from posttrain.cli import main as cli_main
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model

QUESTIONS = ["1+1?", "2+2?", "3+3?", "4+4?"]
REWARD = "def by_length(data_source, solution_str, ground_truth, extra_info=None):\n    return len(solution_str) / 10\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasklog")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    rows = [{"prompt": [{"role": "user", "content": q}], "reward_model": {"ground_truth": str(2 * (k + 1))}, "data_source": "math"}
            for k, q in enumerate(QUESTIONS)]
    pq.write_table(pa.Table.from_pylist(rows), root / "math.parquet")
    (root / "reward.py").write_text(REWARD)
    return root


def _explore(files, tmp_path, *extra: str) -> list[str]:
    config = tmp_path / "explore.yaml"
    config.write_text("{}\n")
    args = [f"model.path={files / 'model'}", f"data.train_files={files / 'math.parquet'}", "data.max_prompt_length=48",
            "data.max_response_length=6", "data.train_batch_size=2", "rollout.n=3", "actor.ppo_mini_batch_size=2",
            "trainer.logger=[]", "trainer.mode=explore", "trainer.total_training_steps=2", "data.shuffle=false",
            f"reward.custom_reward_function.path={files / 'reward.py'}", "reward.custom_reward_function.name=by_length",
            f"trainer.default_local_dir={tmp_path / 'run'}", *extra]
    assert cli_main(["train", str(config), *args]) == 0
    return args


def test_every_explored_task_appends_its_rewards(files, tmp_path, monkeypatch):
    log = tmp_path / "logs" / "ref_eval.jsonl"  # its folder is made
    _explore(files, tmp_path, f"explorer.task_rewards_file={log}")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["question"][0]["content"] for line in lines] == QUESTIONS  # one line per task, two batches of two
    assert [line["truth"] for line in lines] == ["2", "4", "6", "8"]
    assert all(line["model_version"] == 0 and len(line["rewards"]) == 3 for line in lines)  # the starting weights, rollout.n
    buffer = ExperienceBuffer(tmp_path / "run" / "experience_buffer.sqlite")
    try:
        stored = {}
        for b in (1, 2):
            e = buffer.read(b)
            for uid, score in zip(e.batch.group_index, e.scores.tolist()):
                stored.setdefault(uid, []).append(score)
    finally:
        buffer.close()
    assert [line["rewards"] for line in lines] == list(stored.values())  # the scores the buffer holds, task by task
    # BOTS's join (ref_eval_collect.py): each row's mean reward by its first message's content
    data = pq.read_table(files / "math.parquet").to_pandas()
    where = {cell[0]["content"]: i for i, cell in enumerate(data["prompt"])}
    passrate = [0.0] * len(data)
    for line in lines:
        passrate[where[line["question"][0]["content"]]] = float(np.mean(line["rewards"]))
    assert passrate == [pytest.approx(sum(v) / 3) for v in stored.values()]
    # a second run appends (as the workflow's "a" mode): the file holds both runs' lines
    _explore(files, tmp_path, f"explorer.task_rewards_file={log}", "trainer.resume_mode=disable",
             f"trainer.default_local_dir={tmp_path / 'again'}")
    assert len(log.read_text().splitlines()) == 8


def test_without_it_no_file_is_written(files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _explore(files, tmp_path)
    assert not list(tmp_path.glob("*.jsonl")) and not (tmp_path / "run" / "bots_ref_eval_log.jsonl").exists()


def test_where_no_task_is_scored_in_place_it_is_refused(tmp_path):
    for extra, message in ((["algorithm.kind=sft"], "explores none"),
                           (["reward.launch_reward_fn_async=true"], "launch_reward_fn_async"),
                           (["data.custom_cls.path=ds.py"], "custom_cls")):
        with pytest.raises(ConfigError, match=message):
            load_config(None, ["explorer.task_rewards_file=log.jsonl", *extra])
