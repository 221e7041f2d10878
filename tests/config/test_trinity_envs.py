"""Trinity-RFT's frozen_lake_workflow and sciworld_workflow translate onto an agentic stage (posttrain.config.dialects.trinity_envs)."""

from __future__ import annotations

import gc
import importlib.util
import json
import shutil
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


SCIWORLD = Path(__file__).resolve().parent / "reference_configs" / "trinity_grpo_sciworld_sciworld.yaml"
# rows as Trinity-RFT's get_sciworld_data.py writes them: task_desc a JSON string, jar_path the writer's machine's
SCI_TASKS = [json.dumps({"task_name": name, "var_num": var, "jar_path": "/your/path/ScienceWorld/scienceworld/scienceworld.jar"})
             for name, var in (("find-living-thing", 1), ("find-plant", 0))]


def test_sciworld_becomes_an_environment_reading_the_prompt_column():
    raw = {"buffer": {"batch_size": 4, "explorer_input": {"taskset": {
        "path": "tasks.jsonl", "repeat_times": 8, "default_workflow_type": "sciworld_workflow", "format": {"prompt_key": "task_desc"},
        "default_reward_fn_type": "math_reward"}}}}
    native, report = translate(raw, "trinity")
    entries = {e.key: (e.status, e.reason) for e in report.entries}
    assert native["env"]["custom_envs"] == {"sciworld": {"env_type": "trinity_sciworld", "env_config": {}, "max_steps": 30,
                                                         "episode_columns": {"task_desc": "task_desc"}, "episode_files": ["tasks.jsonl"]}}
    assert native["env"]["train_env_manager"] == {"tags": ["sciworld"], "num_env_groups": 4, "group_size": 8}
    assert report.entry(f"{_IN}.taskset.format.prompt_key").native == "env.custom_envs.sciworld.episode_columns.task_desc"
    assert "prompt_key" not in native.get("data", {})
    assert entries[f"{_IN}.taskset.default_reward_fn_type"] == ("dropped", "sciworld_workflow rewards its episodes itself "
                                                                "(its best score / 100) and calls no reward function")
    # Trinity's default prompt_key is "prompt"; it reads no workflow_args
    raw["buffer"]["explorer_input"]["taskset"].update(format={}, workflow_args={"max_env_steps": 10})
    native, report = translate(raw, "trinity")
    assert native["env"]["custom_envs"]["sciworld"]["episode_columns"] == {"task_desc": "prompt"}
    assert report.entry(f"{_IN}.taskset.workflow_args.max_env_steps").status == "refused"
    # an evaluation taskset of its own: sciworld_eval0, every row once
    raw["buffer"]["explorer_input"].update(eval_tasksets=[{"path": "a.jsonl", "repeat_times": 2}], default_workflow_type="sciworld_workflow")
    del raw["buffer"]["explorer_input"]["taskset"]["workflow_args"]
    native, _ = translate(raw, "trinity")
    assert native["env"]["val_env_manager"] == {"tags": ["sciworld_eval0"], "num_env_groups": 0, "group_size": 2}
    assert native["env"]["custom_envs"]["sciworld_eval0"]["episode_files"] == ["a.jsonl"]


@pytest.mark.skipif(shutil.which("java") is None or importlib.util.find_spec("scienceworld") is None,
                    reason="ScienceWorld needs the scienceworld package and a `java` on PATH")
def test_the_published_sciworld_file_runs_as_an_agentic_stage(tmp_path, monkeypatch):
    import scienceworld

    from posttrain.envs import trinity_sciworld

    folder = tmp_path / "examples" / "grpo_sciworld" / "sciworld_data"  # the file's taskset path, from the working folder
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text("".join(json.dumps({"task_desc": t, "targe": ""}) + "\n" for t in SCI_TASKS))
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, max_position=2048, seed=0)
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model))
    small = ["buffer.batch_size=1", "algorithm.repeat_times=2", "model.max_model_len=2000", "model.max_response_tokens=700",
             "trainer.max_token_len_per_gpu=8000", "cluster.gpu_per_node=1", "explorer.rollout_model.engine_num=1",
             "explorer.rollout_model.tensor_parallel_size=1"]
    native = read_foreign(SCIWORLD, overrides=small).native
    entry = native["env"]["custom_envs"]["sciworld"]
    # the instruction shortened (the tiny model reads one token per character), short actions, and two
    # actions an episode instead of Trinity's 30, so the loop's cut is played; the rest is the file's
    entry.update(env_instruction="Act in <action></action>.", max_steps=2, max_tokens_per_step=30)
    (tmp_path / "native.yaml").write_text(yaml.safe_dump(native))
    cfg = load_config(tmp_path / "native.yaml", ["trainer.logger=[]", "cluster.device=cpu", "rollout.name=hf"])
    idle = len(trinity_sciworld._IDLE.get(None, []))
    started = []
    monkeypatch.setattr(scienceworld, "ScienceWorldEnv", lambda *a, **k: started.append(1) or real(*a, **k))
    real = scienceworld.scienceworld.ScienceWorldEnv
    t = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)))
    assert t.derived.total_training_steps == 40  # total_epochs 20 x 2 rows // 1 task a step
    t.roles.sync.push(t.roles.actor.version)
    for step, task in ((1, "find a(n) living thing"), (2, "find a(n) plant")):  # the next row each step, repeat_times environments
        batch = t.explore(step, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version).batch
        assert [e["seed"] for e in batch.extra_info] == [step - 1] * 2  # seedless rows: their positions
        assert all(f"Observation: \nTask Description: Your task is to {task}." in p for p in batch.raw_prompt)
        assert all(0 < e["turns"] <= 2 for e in batch.extra_info)  # cut after max_steps actions
    gc.collect()
    # two environments at a time: at most two simulators ever started, handed back for the next step
    assert len(started) == max(0, 2 - idle) and len(trinity_sciworld._IDLE[None]) == max(idle, 2)


def test_a_taskset_that_is_not_here_converts_into_the_entrys_episode_files(tmp_path):
    """Converted on a machine without the taskset folder, the environment entry keeps the folder's
    split as its episode_files (not data.train_files), and reads its rows once the folder is there."""
    from posttrain.config.dialects import convert
    from posttrain.envs.spec import parse_custom_envs

    lakes = tmp_path / "on_the_cluster" / "lakes"
    raw = {"model": {"model_path": "m"}, "buffer": {"batch_size": 1, "explorer_input": {
        "taskset": {"path": str(lakes), "default_workflow_type": "frozen_lake_workflow"},
        "eval_tasksets": [{"path": str(lakes), "default_workflow_type": "frozen_lake_workflow"}]}}}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    text, foreign, _ = convert(tmp_path / "t.yaml", "trinity")
    native = yaml.safe_load(text)
    envs = native["env"]["custom_envs"]
    assert envs["frozen_lake"]["episode_files"] == [f"{lakes}@train"] and envs["frozen_lake_eval0"]["episode_files"] == [f"{lakes}@test"]
    assert "train_files" not in native.get("data", {}) and "# NOT ON THIS MACHINE" in text
    lakes.mkdir(parents=True)
    for split, seeds in (("train", [3, 4]), ("test", [7])):
        (lakes / f"{split}.jsonl").write_text("".join(f'{{"seed": {s}, "size": 3}}\n' for s in seeds))
    specs = parse_custom_envs(native["env"]["custom_envs"])
    assert [e["seed"] for e in specs["frozen_lake"].episodes] == [3, 4] and [e["seed"] for e in specs["frozen_lake_eval0"].episodes] == [7]
    assert specs["frozen_lake"].episodes[0]["size"] == 3


ALFWORLD = Path(__file__).resolve().parent / "reference_configs" / "trinity_grpo_alfworld_alfworld.yaml"
ALFWORLD_STEPS = Path(__file__).resolve().parent / "reference_configs" / "trinity_grpo_alfworld_general_multi_step_alfworld.yaml"


def _alfworld(workflow: str, algorithm: str, **taskset) -> tuple[dict, dict]:
    raw = {"algorithm": {"algorithm_type": algorithm, "repeat_times": 4},
           "explorer": {"rollout_model": {"enable_history": taskset.pop("history", True)}},
           "buffer": {"batch_size": 2, "explorer_input": {"taskset": {
               "path": "tasks.jsonl", "default_workflow_type": workflow, "format": {"prompt_key": "game_file"}, **taskset}}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_alfworld_workflows_become_the_alfworld_environment():
    native, entries = _alfworld("alfworld_workflow", "grpo", workflow_args={"max_env_steps": 12}, history=False)
    assert native["env"]["custom_envs"]["alfworld"] == {
        "env_type": "trinity_alfworld", "env_config": {"max_env_steps": 12}, "max_steps": 12,
        "episode_columns": {"task_desc": "game_file"}, "episode_files": ["tasks.jsonl"]}
    assert native["env"]["train_env_manager"] == {"tags": ["alfworld"], "num_env_groups": 2, "group_size": 4}
    assert entries[f"{_IN}.taskset.workflow_args.max_env_steps"][0] == "translated"
    assert native["env"].get("train_rows", "episode") == "episode"
    # Trinity's default max_env_steps is 30
    native, _ = _alfworld("alfworld_workflow", "grpo", history=False)
    assert native["env"]["custom_envs"]["alfworld"]["max_steps"] == 30
    # one experience per episode: under multi_step_grpo that is grpo over episode rows, one optimizer step a batch
    native, entries = _alfworld("alfworld_workflow", "multi_step_grpo", history=False)
    assert native["env"].get("train_rows", "episode") == "episode" and "turn_mini_batch_size" not in native["env"]
    assert native["actor"]["ppo_mini_batch_size"] == 2
    # the step-wise workflow: every model call an experience with its episode's reward -> turn rows
    native, entries = _alfworld("step_wise_alfworld_workflow", "multi_step_grpo")
    assert native["env"]["custom_envs"]["alfworld"]["env_type"] == "trinity_alfworld"
    assert (native["env"]["train_rows"], native["env"]["turn_mini_batch_size"]) == ("turn", 8)  # batch_size 2 x repeat_times 4
    assert entries["explorer.rollout_model.enable_history"][0] == "dropped"
    # Trinity-RFT stops without the call history; another algorithm would group the turns as responses
    _, entries = _alfworld("step_wise_alfworld_workflow", "multi_step_grpo", history=False)
    assert entries["explorer.rollout_model.enable_history"][0] == "refused"
    _, entries = _alfworld("step_wise_alfworld_workflow", "grpo")
    assert entries[f"{_IN}.taskset.default_workflow_type"][0] == "refused"
    assert "algorithm_type multi_step_grpo" in entries[f"{_IN}.taskset.default_workflow_type"][1]


@pytest.mark.skipif(importlib.util.find_spec("alfworld") is None or importlib.util.find_spec("textworld") is None,
                    reason="ALFWorld needs the alfworld and textworld packages (the envs extra)")
@pytest.mark.parametrize("published", [ALFWORLD, ALFWORLD_STEPS], ids=["alfworld", "step_wise"])
def test_the_published_alfworld_files_run_as_an_agentic_stage(published, tmp_path, monkeypatch):
    """Both published files, unchanged but for sizes, play real ALFWorld games on posttrain's agent loop:
    the rows' game_file column names each episode's game."""
    from posttrain.envs.trinity_alfworld import SYSTEM_PROMPT, write_game

    folder = tmp_path / "examples" / "grpo_alfworld" / "alfworld_data"  # both files' taskset path
    folder.mkdir(parents=True)
    games = [write_game(str(tmp_path / "games" / str(i))) for i in range(2)]
    (folder / "train.jsonl").write_text("".join(json.dumps({"game_file": g, "target": ""}) + "\n" for g in games))
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, max_position=4096, seed=0)
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model))
    small = ["buffer.batch_size=1", "algorithm.repeat_times=2", "model.max_model_len=3000", "model.max_response_tokens=400",
             "model.max_prompt_tokens=2500", "trainer.max_token_len_per_gpu=8000", "cluster.gpu_per_node=1",
             "explorer.rollout_model.engine_num=1", "explorer.rollout_model.tensor_parallel_size=1"]
    if published == ALFWORLD_STEPS:
        small += ["buffer.train_batch_size=6", "~model.max_prompt_tokens"]
    native = read_foreign(published, overrides=small).native
    entry = native["env"]["custom_envs"]["alfworld"]
    assert entry["episode_columns"] == {"task_desc": "game_file"} and entry["env_config"] == {"max_env_steps": 30}
    # two actions an episode (the -0.1 of an unfinished game comes at max_env_steps), short replies
    entry.update(env_config={"max_env_steps": 2}, max_steps=2, max_tokens_per_step=20)
    (tmp_path / "native.yaml").write_text(yaml.safe_dump(native))
    cfg = load_config(tmp_path / "native.yaml", ["trainer.logger=[]", "cluster.device=cpu", "rollout.name=hf"])
    assert cfg.env.train_rows == ("turn" if published == ALFWORLD_STEPS else "episode")
    t = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)))
    assert t.derived.total_training_steps == 40  # total_epochs 20 x 2 rows // 1 task a step
    t.roles.sync.push(t.roles.actor.version)
    batch = t.explore(1, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version).batch
    assert all(p.startswith(SYSTEM_PROMPT.strip()[:40]) or SYSTEM_PROMPT.strip()[:40] in p for p in batch.raw_prompt)
    assert all("Observation: -= Welcome to TextWorld, ALFRED! =-" in p for p in batch.raw_prompt)
    assert "put some apple on countertop" in batch.raw_prompt[0]
    # a random tiny policy does not win in two actions: each episode ends on its second with Trinity's -0.1
    assert [e["turns"] for e in batch.extra_info] == [2, 2]
    assert [e["turn_rewards"] for e in batch.extra_info] == [[0.0, -0.1]] * 2 and not any(e["success"] for e in batch.extra_info)


RAFT = Path(__file__).resolve().parent / "reference_configs" / "trinity_RAFT_alfworld_RAFT_alfworld_7B.yaml"


def test_raft_fine_tunes_on_the_won_well_formatted_alfworld_episodes(tmp_path, monkeypatch):
    """The published RAFT file: RAFT's own ALFWorld rules, the SFT loss, and only the episodes the
    workflow returns (scored at least 1, every reply with its three tags) in the losses."""
    for split in ("train", "test"):
        (tmp_path / "games" / f"{split}.jsonl").parent.mkdir(exist_ok=True)
        (tmp_path / "games" / f"{split}.jsonl").write_text('{"game_file": "/g/game.tw-pddl", "task_desc": ""}\n' * 80)
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(tmp_path / "games"))
    foreign = read_foreign(RAFT)
    native, entries = foreign.native, {e.key: (e.status, e.reason) for e in foreign.report.entries}
    assert native["algorithm"]["kind"] == "rl" and native["actor"]["policy_loss"]["loss_mode"] == "sft"
    assert native["actor"]["use_kl_loss"] is False
    assert (native["algorithm"]["min_score_mask"], native["algorithm"]["valid_actions_mask"]) == (1.0, True)
    assert native["env"]["custom_envs"]["alfworld"] == {
        "env_type": "trinity_raft_alfworld", "env_config": {}, "max_steps": 50, "max_tokens_per_step": 4096,
        "episode_columns": {"task_desc": "game_file"}, "episode_files": [str(tmp_path / "games" / "train.jsonl")]}
    assert native["env"]["custom_envs"]["alfworld_eval0"]["env_type"] == "trinity_raft_alfworld"
    assert native["env"]["train_env_manager"] == {"tags": ["alfworld"], "num_env_groups": 80, "group_size": 1}
    assert "response_key" not in native["data"]  # the episodes have no answer column
    assert entries[f"{_IN}.taskset.format.response_key"][0] == "dropped"
    # raft over another workflow fine-tunes on every response it returns, as Trinity-RFT's RAFT type does
    native, _ = translate({"algorithm": {"algorithm_type": "raft"}, "buffer": {"explorer_input": {"taskset": {"path": "tasks.jsonl"}}}}, "trinity")
    assert native["actor"]["policy_loss"]["loss_mode"] == "sft" and "min_score_mask" not in native.get("algorithm", {})
    # the reflective twin plays a second, guided attempt: refused with what it needs
    _, entries = _alfworld("RAFT_reflect_alfworld_workflow", "raft")
    assert entries[f"{_IN}.taskset.default_workflow_type"][0] == "refused"
    assert "second time" in entries[f"{_IN}.taskset.default_workflow_type"][1]
