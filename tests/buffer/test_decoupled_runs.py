"""Decoupled runs through the real command: `trainer.mode: both` with a lagging synchronizer (an
explorer process and a trainer process), `explore` then `train`, and the faults of either side."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from cli_run_helpers import posttrain

from posttrain.buffer.sqlite import ExperienceBuffer
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

CONFIG = """
data: {{train_files: {d}/train.parquet, val_files: {d}/test.parquet, train_batch_size: 4, max_prompt_length: 32, max_response_length: 6}}
model: {{path: {m}}}
rollout: {{n: 4}}
actor: {{ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 16, optim: {{lr: 1e-3}}}}
trainer: {{total_training_steps: 4, save_freq: 1, test_freq: 2, val_before_train: true, logger: [console, jsonl]}}
"""
STEPS = 4


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("decoupled")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=32, test=4, sft=0, dpo=0)
    (root / "run.yaml").write_text(CONFIG.format(d=root / "data", m=root / "model"))
    return root


def train(inputs: Path, run: str, *overrides: str, kill: str = "") -> subprocess.CompletedProcess:
    """The command in this process. The explorer and trainer processes it starts (forked by the fork
    server) are processes of their own all the same: the test hook kills one of them, never this one,
    and the trainer's console output is captured with the command's."""
    args = ["train", str(inputs / "run.yaml"), f"trainer.default_local_dir={inputs / run}", *overrides]
    return posttrain(*args, cwd=inputs, env={"POSTTRAIN_TEST_KILL": kill}, fds=True)


def rows(inputs: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (inputs / run / "metrics.jsonl").read_text().splitlines()]


def claims(inputs: Path, run: str, name: str = "experience_buffer") -> list[tuple[int, int | None]]:
    buffer = ExperienceBuffer(inputs / run / f"{name}.sqlite")
    try:
        return buffer.claimed()
    finally:
        buffer.close()


@pytest.fixture(scope="module")
def in_step(inputs) -> list[dict]:
    out = train(inputs, "sync")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "decoupled run" not in out.stdout  # interval 1, offset 0: the synchronous loop
    return rows(inputs, "sync")


@pytest.mark.slow
def test_both_with_a_lagging_synchronizer_runs_an_explorer_and_a_trainer(inputs, in_step):
    out = train(inputs, "lag", "synchronizer.sync_interval=2", "synchronizer.sync_method=checkpoint")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "decoupled run: trainer (pid" in out.stdout
    got = rows(inputs, "lag")
    assert [r["step"] for r in got] == [r["step"] for r in in_step] == [0, 1, 2, 3, 4]
    staleness = [r["async/staleness"] for r in got if "async/staleness" in r]
    assert len(staleness) == STEPS and all(0 <= s <= 1 for s in staleness)  # sync_interval 2: at most 1 step behind
    # step 1 samples the starting weights in both runs: the same batch, the same update
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
        assert got[1][key] == pytest.approx(in_step[1][key], rel=1e-5, abs=1e-6), key
    # the explorer validated the weights the trainer had at steps 0, 2 and 4; step 0 equals the synchronous run's
    assert [r["step"] for r in got if "val/score/mean" in r] == [0, 2, 4]
    assert got[0]["val/score/mean"] == pytest.approx(in_step[0]["val/score/mean"])
    assert claims(inputs, "lag") == [(b, b) for b in range(1, STEPS + 1)]
    assert (inputs / "lag" / "workers" / "explorer.log").is_file()
    # sync_method checkpoint: the weights went through files (interval 2: steps 0, 2, 4; the newest three stay)
    assert sorted(p.name for p in (inputs / "lag" / "published_weights").glob("step_*.safetensors")) == [f"step_{k}.safetensors" for k in (0, 2, 4)]


@pytest.mark.slow
def test_split_placement_trains_on_policy_as_the_synchronous_loop(inputs, in_step):
    # the trainer on device 0, an explorer of two engine processes on devices 1 and 2; the weights go
    # from the trainer's memory to each engine process over a process group (sync_method nccl, the default: gloo here)
    out = train(inputs, "split", "cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.rollout=[1,2]")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "decoupled run: trainer (pid" in out.stdout  # the engines in processes of their own
    explorer_log = (inputs / "split" / "workers" / "explorer.log").read_text()
    assert "2 worker processes on cpu" in explorer_log and "each hosts rollout, reward (an explorer" in explorer_log
    assert (inputs / "split" / "workers" / "explorer_rank1.log").is_file()
    assert sorted(p.name for p in (inputs / "split" / "published_weights").iterdir()) == ["channel.json", "latest.txt"]  # none on disk
    got = rows(inputs, "split")
    assert [r.get("async/staleness") for r in got] == [None] + [0.0] * STEPS  # every batch sampled by the newest weights
    # on-policy, each side waits for the other: the explorer for step b-1's weights before batch b
    # (none before batch 1), the trainer for every batch while the explorer generates it
    idle_explorer = [r["timing/idle_explorer_s"] for r in got[1:]]
    assert idle_explorer[0] == 0.0 and all(s > 0 for s in idle_explorer[1:]), idle_explorer
    assert all(r["timing/idle_trainer_s"] > 0 for r in got[1:])
    # the same weights sample the same batches: every step as in step, to float rounding (old log-probs
    # are recomputed by the trainer instead of reused from the rollout)
    for mine, theirs in zip(got, in_step):
        for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "val/score/mean"):
            if key in theirs:
                assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-5), (mine["step"], key)


@pytest.mark.slow
def test_explore_then_train_trains_every_stored_batch_once(inputs, in_step):
    buffer = f"buffer.trainer_input.experience_buffer.path={inputs / 'offline.sqlite'}"
    assert "explorer" not in "".join(p.name for p in inputs.glob("offline*"))
    empty = train(inputs, "offline-early", "trainer.mode=train", buffer)
    assert empty.returncode == 2 and "holds none; fill it first with trainer.mode=explore" in empty.stderr
    assert not (inputs / "offline-early" / "checkpoints").exists()  # said before any model was built
    # two engines (two explorer processes) store the batches one engine would
    explored = train(inputs, "offline-explore", "trainer.mode=explore", buffer, "cluster.n_gpus_per_node=2",
                     "cluster.device_mapping.rollout=[0,1]")
    assert explored.returncode == 0, explored.stderr[-3000:]
    buf = ExperienceBuffer(inputs / "offline.sqlite")
    assert buf.explored() == STEPS and buf.evaluations_through(STEPS) and list(buf.evaluations_through(STEPS)) == [0]
    buf.close()
    trained = train(inputs, "offline-train", "trainer.mode=train", buffer)
    assert trained.returncode == 0, trained.stderr[-3000:]
    got = [r for r in rows(inputs, "offline-train") if "async/staleness" in r]
    assert [r["async/staleness"] for r in got] == [float(s) for s in range(STEPS)]  # all sampled by the starting weights
    assert got[0]["critic/score/mean"] == pytest.approx(in_step[1]["critic/score/mean"])
    assert got[0]["actor/pg_loss"] == pytest.approx(in_step[1]["actor/pg_loss"], rel=1e-5, abs=1e-6)
    buf = ExperienceBuffer(inputs / "offline.sqlite")
    assert buf.claimed() == [(b, b) for b in range(1, STEPS + 1)]
    buf.close()
    # one step more than the explorer stored: the trainer waits max_read_timeout, then names what the explorer did
    short = train(inputs, "offline-short", "trainer.mode=train", buffer, f"trainer.total_training_steps={STEPS + 1}",
                  "buffer.trainer_input.experience_buffer.max_read_timeout=1")
    assert short.returncode == 2
    assert f"trainer step {STEPS + 1} waited 1 s for explored batch {STEPS + 1}" in short.stderr
    assert f"explorer: finished: {STEPS} batches written" in short.stderr


@pytest.mark.slow
@pytest.mark.parametrize("side, kill", [("explorer", "main:2:explored"), ("trainer", "main:2:after_step")])
def test_a_killed_side_stops_the_run_and_the_rerun_loses_and_repeats_nothing(inputs, side, kill):
    run = f"killed-{side}"
    start = time.monotonic()
    out = train(inputs, run, "synchronizer.sync_interval=2", kill=kill)
    assert out.returncode == 1, out.stderr[-3000:]
    assert f"the {side} process was killed by SIGKILL" in out.stderr and "Traceback" not in out.stderr
    assert time.monotonic() - start < 120
    again = train(inputs, run, "synchronizer.sync_interval=2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert claims(inputs, run) == [(b, b) for b in range(1, STEPS + 1)]  # every batch trained once, in its step
    logged = [r["step"] for r in rows(inputs, run) if "async/staleness" in r]
    assert logged == list(range(1, STEPS + 1))  # each step logged once after the resume's trimming


def test_what_the_split_cannot_do_is_refused_before_it_starts(inputs):
    out = train(inputs, "refused", "trainer.mode=explore", "cluster.n_gpus_per_node=2")
    assert out.returncode == 2 and "one process per engine on cluster.device_mapping.rollout's devices" in out.stderr
    out = train(inputs, "refused", "buffer.trainer_input.experience_buffer.capacity=2")
    assert out.returncode == 2 and "capacity (2 prompt groups) cannot hold one batch of data.train_batch_size (4)" in out.stderr


@pytest.mark.slow
def test_a_dynamic_sync_style_with_two_trainer_ranks_trains_as_one_and_records_each_batch_version(inputs, in_step):
    out = train(inputs, "dynamic", "synchronizer.sync_style=dynamic_by_explorer", "synchronizer.sync_interval=2",
                "cluster.n_gpus_per_node=2", "trainer.save_freq=0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "decoupled run: trainer (pid" in out.stdout and "2 worker processes on cpu" in out.stdout
    got = [r for r in rows(inputs, "dynamic") if "async/staleness" in r]
    assert [r["step"] for r in got] == list(range(1, STEPS + 1)) and {r["dist/world_size"] for r in got} == {2.0}
    assert claims(inputs, "dynamic") == [(b, b) for b in range(1, STEPS + 1)]
    buffer = ExperienceBuffer(inputs / "dynamic" / "experience_buffer.sqlite")
    versions = [v for _, v in buffer.db.execute("SELECT batch, policy_step FROM experiences ORDER BY batch")]
    buffer.close()
    # the explorer first asks after 2 batches: batches 1 and 2 are sampled by the starting weights
    assert versions[:2] == [0, 0] and versions == sorted(versions) and all(v <= b - 1 for b, v in enumerate(versions, 1))
    assert [r["async/staleness"] for r in got] == [float(s - 1 - v) for s, v in zip(range(1, STEPS + 1), versions)]
    assert (inputs / "dynamic" / "published_weights" / "sync_answer.json").is_file()  # the trainer answered
    # step 1 trains the batch the starting weights sampled: the two ranks' update is the one process's
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
        assert got[0][key] == pytest.approx(in_step[1][key], rel=1e-5, abs=1e-6), key
