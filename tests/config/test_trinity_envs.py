"""Trinity-RFT's frozen_lake_workflow translates onto an agentic stage (posttrain.config.dialects.trinity_envs)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from posttrain.config import load_config
from posttrain.config.dialects import read_foreign, translate
from posttrain.models.tiny import make_tiny_model
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext

LAKE = Path(__file__).resolve().parent / "reference_configs" / "trinity_grpo_frozen_lake_frozen_lake.yaml"
_IN = "buffer.explorer_input"


@pytest.fixture(autouse=True)
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("tasks.jsonl", "a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text('{"seed": 1}\n')


def run(taskset: dict, **explorer_input):
    raw = {"model": {"enable_prompt_truncation": False}, "buffer": {"batch_size": 3, "explorer_input": {
        "taskset": {"path": "tasks.jsonl", "repeat_times": 2, "default_workflow_type": "frozen_lake_workflow", **taskset}, **explorer_input}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_the_workflow_becomes_an_environment_with_its_args():
    native, entries = run({"workflow_args": {"agent_max_steps": 4, "is_slippery": True}, "default_reward_fn_type": "math_reward"})
    env = native["env"]
    assert env["custom_envs"]["frozen_lake"] == {"env_type": "trinity_frozen_lake", "max_steps": 4, "episode_files": ["tasks.jsonl"],
                                                 "env_config": {"env_max_steps": 8, "agent_max_steps": 4, "is_slippery": True}}
    assert (env["train_env_manager"]["num_env_groups"], env["train_env_manager"]["group_size"]) == (3, 2)  # batch_size tasks x repeat_times
    assert "train_files" not in native.get("data", {})
    assert entries[f"{_IN}.taskset.default_reward_fn_type"][0] == "dropped"  # the workflow rewards its episodes itself
    assert entries["model.enable_prompt_truncation"][0] == "dropped"  # the agent loop never cuts a turn's context
    _, entries = run({"workflow_args": {"desc": ["SFG"], "seed": 1}})
    assert "draws each row's map" in entries[f"{_IN}.taskset.workflow_args.desc"][1]
    assert entries[f"{_IN}.taskset.workflow_args.seed"][0] == "refused"


def test_evaluation_tasksets_play_every_row_once():
    # evaluation tasksets inherit buffer.explorer_input's workflow (not the training taskset's own)
    native, _ = run({}, eval_tasksets=[{"path": "a.jsonl", "repeat_times": 4}, {"path": "b.jsonl", "repeat_times": 4}],
                    default_workflow_type="frozen_lake_workflow")
    val = native["env"]["val_env_manager"]
    assert val == {"tags": ["frozen_lake_eval0", "frozen_lake_eval1"], "num_env_groups": 0, "group_size": 4}
    assert native["env"]["custom_envs"]["frozen_lake_eval1"]["episode_files"] == ["b.jsonl"] and "val_files" not in native["data"]
    _, entries = run({}, eval_tasksets=[{"path": "a.jsonl", "repeat_times": 4}, {"path": "b.jsonl", "repeat_times": 2}],
                     default_workflow_type="frozen_lake_workflow")
    assert entries[f"{_IN}.eval_tasksets"][0] == "refused"


def test_prompt_truncation_false_is_refused_outside_an_environment_workflow():
    _, entries = run({"default_workflow_type": "simple_workflow"})
    status, reason = entries["model.enable_prompt_truncation"]
    assert status == "refused" and "raise max_prompt_tokens" in reason


def _taskset(folder: Path, rows: int) -> None:
    # the columns Trinity-RFT's get_frozen_lake_data.py writes
    for split, n, first in (("train", rows, 100), ("test", 2, 900)):
        pq.write_table(pa.table({"seed": [first + i for i in range(n)], "size": [2 + i % 2 for i in range(n)],
                                 "p": [0.8] * n, "index": list(range(n)), "uid": [f"u{i}" for i in range(n)]}), folder / f"{split}.parquet")


def test_the_published_file_runs_as_an_agentic_stage(tmp_path, monkeypatch):
    _taskset(tmp_path, rows=5)
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, max_position=512, seed=0)
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(tmp_path))
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model))
    small = ["buffer.batch_size=2", "algorithm.repeat_times=2", "model.max_model_len=440", "model.max_response_tokens=40",
             f"{_IN}.taskset.workflow_args.agent_max_steps=2", "trainer.max_token_len_per_gpu=4000", "cluster.gpu_per_node=1",
             "explorer.rollout_model.engine_num=1", "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.param_offload=false",
             "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
             "trainer.trainer_config.actor_rollout_ref.ref.fsdp_config.param_offload=false"]
    native = read_foreign(LAKE, overrides=small).native
    # the instruction shortened (the tiny model reads one token per character); the rest is the file's
    native["env"]["custom_envs"]["frozen_lake"]["env_instruction"] = "Reach G."
    (tmp_path / "native.yaml").write_text(yaml.safe_dump(native))
    cfg = load_config(tmp_path / "native.yaml", ["trainer.logger=[]", "cluster.device=cpu", "rollout.name=hf"])
    t = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)))
    assert t.derived.total_training_steps == 2  # total_epochs 1 x 5 rows // 2 tasks a step
    t.roles.sync.push(t.roles.actor.version)
    for step, seeds in ((1, [100, 100, 101, 101]), (2, [102, 102, 103, 103])):  # the next rows each step, repeat_times each
        batch = t.explore(step, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version).batch
        assert [e["seed"] for e in batch.extra_info] == seeds
        assert "Current Observation (0): \n" in batch.raw_prompt[0] and "remaining is 2." in batch.raw_prompt[0]
