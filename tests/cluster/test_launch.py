"""`posttrain train ... cluster.n_gpus_per_node=2` on the CPU: two gloo worker processes run the same
stages as one process, a killed worker ends the run with a message naming it, and a rerun resumes
from the newest complete checkpoint, on the same or another number of workers.

Every run is the real command (in this process unless the test hook kills that process: its worker
processes are forked from posttrain's fork server all the same): SFT (2 steps) -> DPO (2 steps) -> GRPO (3 steps) on a
1-layer model, checkpoints after every step.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import torch
from cli_run_helpers import posttrain
from safetensors.torch import load_file

from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

CONFIG = """
data: {{train_files: {d}/train.parquet, val_files: {d}/test.parquet, train_batch_size: 4, max_prompt_length: 32, max_response_length: 6}}
model: {{path: {m}}}
rollout: {{n: 4}}
actor: {{ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 4, use_kl_loss: true, optim: {{lr: 1e-3}}}}
trainer: {{total_training_steps: 3, save_freq: 1, test_freq: 3, logger: [console, jsonl]}}
stages:
  - name: sft
    algorithm: {{kind: sft}}
    data: {{train_files: {d}/sft_train.parquet, val_files: [], train_batch_size: 8}}
    trainer: {{total_training_steps: 2}}
  - name: dpo
    algorithm: {{kind: dpo}}
    data: {{train_files: {d}/dpo_train.parquet, val_files: [], train_batch_size: 4}}
    trainer: {{total_training_steps: 2}}
  - name: rl
"""

# Metrics that must agree between runs (to float rounding: gradients are summed in another order).
COMPARED = {
    "sft": ["sft/loss", "actor/grad_norm"],
    "dpo": ["dpo/loss", "dpo/margin", "actor/grad_norm"],
    "rl": ["critic/score/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "val/score/mean"],
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("launch")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=16, test=4, sft=16, dpo=8)
    (root / "run.yaml").write_text(CONFIG.format(d=root / "data", m=root / "model"))
    return root


def train(inputs: Path, run: str, workers: int, kill: str | None = None, *overrides: str) -> subprocess.CompletedProcess:
    """The command in this process, its workers' output captured with its own (the workers are
    processes of their own all the same); in a subprocess where the test hook kills the one process
    that trains, or Ray starts the workers (Ray's driver state stays out of the test process)."""
    args = ["train", str(inputs / "run.yaml"), f"trainer.default_local_dir={inputs / run}", f"cluster.n_gpus_per_node={workers}",
            *overrides]
    apart = bool(kill and workers <= 1) or any(o.startswith(("cluster.launcher=ray", "cluster.ray_address")) for o in overrides)
    return posttrain(*args, cwd=inputs, env={"POSTTRAIN_TEST_KILL": kill or ""}, fds=True, subprocess=apart, timeout=600)


def metrics(inputs: Path, run: str, stage: str) -> list[dict]:
    return [json.loads(line) for line in (inputs / run / stage / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(inputs: Path, a: str, b: str, compared: dict[str, list[str]] = COMPARED) -> None:
    """Runs `a` and `b` log the same `compared` metrics, stage by stage ("": a run of one stage)."""
    for stage, keys in compared.items():
        rows_a, rows_b = metrics(inputs, a, stage), metrics(inputs, b, stage)
        assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b]
        for key in keys:
            pairs = [(ra, rb) for ra, rb in zip(rows_a, rows_b) if key in ra or key in rb]
            assert pairs, f"{stage}: no row logs {key}"
            for ra, rb in pairs:
                assert rb[key] == pytest.approx(ra[key], abs=1e-5, rel=1e-5), (stage, ra["step"], key)


@pytest.fixture(scope="module")
def one_process(inputs: Path) -> str:
    out = train(inputs, "single", 0)
    assert out.returncode == 0, out.stderr[-3000:]
    return "single"


@pytest.fixture(scope="module")
def rl_only(inputs: Path) -> str:
    """The RL stage alone on one process (a run of one stage keeps its files in the run directory)."""
    out = train(inputs, "single-rl", 0, None, "stages=[{name: rl}]")
    assert out.returncode == 0, out.stderr[-3000:]
    return "single-rl"


@pytest.fixture(scope="module")
def two_workers(inputs: Path) -> subprocess.CompletedProcess:
    return train(inputs, "two", 2)


@pytest.mark.slow
def test_two_workers_train_as_one_process(inputs, one_process, two_workers):
    out = two_workers
    assert out.returncode == 0, out.stderr[-3000:]
    assert "posttrain: 2 worker processes on cpu" in out.stdout
    assert_same_run(inputs, one_process, "two")
    rl = metrics(inputs, "two", "rl")
    assert {r["dist/world_size"] for r in rl if "dist/world_size" in r} == {2.0}
    assert {r["dist/world_size"] for r in metrics(inputs, one_process, "rl") if "dist/world_size" in r} == {1.0}
    assert (inputs / "two" / "workers" / "rank1.log").is_file()
    # rank 0 alone writes the run's files; every rank wrote its shard of each checkpoint
    assert len(rl) == len(metrics(inputs, one_process, "rl"))
    shards = sorted(p.name for p in (inputs / "two" / "rl" / "checkpoints" / "global_step_3" / "actor" / "dcp").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert (inputs / "two" / "rl" / "final_model" / "model.safetensors").is_file()


@pytest.mark.slow
def test_sequence_parallel_workers_train_as_one_process(inputs, one_process):
    """Two workers that split every sequence between them (Ulysses, dp 1 x sp 2) in the SFT, DPO and
    RL stages log what one process logs; the reference follows the actor's size."""
    out = train(inputs, "sp", 2, None, "actor.ulysses_sequence_parallel_size=2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_run(inputs, one_process, "sp")
    rows = [r for r in metrics(inputs, "sp", "rl") if "dist/world_size" in r]
    assert rows and all(r["dist/sequence_parallel/actor"] == r["dist/sequence_parallel/reference"] == 2.0 for r in rows)
    assert not any("dist/sequence_parallel/actor" in r for r in metrics(inputs, one_process, "rl"))


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_and_the_rerun_finishes_it_on_one_process(inputs, one_process):
    start = time.monotonic()
    out = train(inputs, "killed", 2, kill="rl:2:after_step:1")
    elapsed = time.monotonic() - start
    assert out.returncode == 1
    assert "worker rank 1 of 2" in out.stderr and "SIGKILL" in out.stderr
    assert "Rerun the same command to resume" in out.stderr and "Traceback" not in out.stderr
    assert elapsed < 120
    marker = inputs / "killed" / "rl" / "checkpoints" / "latest_checkpointed_iteration.txt"
    assert marker.read_text().strip() == "2"
    # the rerun reads the two workers' sharded checkpoint into one process (the Ray test below
    # resumes on the same number of workers, test_lora_workers on more)
    again = train(inputs, "killed", 0)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from" in again.stdout and "after step 2" in again.stdout
    assert_same_run(inputs, one_process, "killed")


@pytest.mark.long  # CI resumes a one-process checkpoint on two workers in test_lora_workers (adapters)
def test_a_one_process_checkpoint_resumes_on_two_workers(inputs, one_process):
    out = train(inputs, "from0to2", 0, kill="rl:2:after_step")
    assert out.returncode != 0
    again = train(inputs, "from0to2", 2)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "after step 2" in again.stdout
    assert_same_run(inputs, one_process, "from0to2")


@pytest.mark.slow
def test_a_hung_worker_is_named_once_its_peers_time_out(inputs):
    start = time.monotonic()
    out = train(inputs, "hung", 2, "rl:1:after_step:1:stop", "stages=[{name: rl}]", "cluster.rpc_timeout_s=10")
    assert out.returncode == 1, out.stderr[-3000:]
    assert "worker rank 1 of 2" in out.stderr and "stopped responding" in out.stderr, out.stderr[-3000:]
    assert time.monotonic() - start < 120


@pytest.mark.slow
def test_export_assembles_a_sharded_checkpoint(inputs, two_workers, tmp_path):
    assert two_workers.returncode == 0, two_workers.stderr[-3000:]
    checkpoint = inputs / "two" / "rl" / "checkpoints" / "global_step_3"
    out = posttrain("export", str(checkpoint), str(tmp_path / "hf"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    final = load_file(str(inputs / "two" / "rl" / "final_model" / "model.safetensors"))
    assert exported.keys() == final.keys()
    assert all(torch.equal(exported[k], final[k]) for k in final)
    assert not (tmp_path / "hf" / "dcp").exists() and (tmp_path / "hf" / "tokenizer.json").is_file()


@pytest.mark.slow
def test_ray_workers_name_a_killed_worker_and_the_rerun_trains_as_one_process(inputs, rl_only):
    """The RL stage alone: the SFT and DPO stages run on the same workers whichever launcher starts
    them, and the local launcher's two-worker tests above compare all three stages."""
    pytest.importorskip("ray", reason="Ray is in the test extra")
    timeline = inputs / "ray-timeline.json"
    ray = ("cluster.launcher=ray", "cluster.ray_num_cpus=2", f"cluster.ray_timeline_file={timeline}",
           "cluster.ray_namespace=launch-test", "stages=[{name: rl}]")
    killed = train(inputs, "ray", 2, "rl:2:after_step:1", *ray)
    assert killed.returncode == 1
    assert "worker rank 1 of 2" in killed.stderr and "died" in killed.stderr, killed.stderr[-3000:]
    assert "Traceback" not in killed.stderr
    timeline.unlink(missing_ok=True)
    again = train(inputs, "ray", 2, None, *ray)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "posttrain: 2 Ray workers on cpu across 1 node(s)" in again.stdout
    assert "Ray namespace launch-test;" in again.stdout
    assert "resuming from" in again.stdout and "after step 2" in again.stdout
    assert_same_run(inputs, rl_only, "ray", {"": COMPARED["rl"]})
    assert isinstance(json.loads(timeline.read_text()), list)  # chrome://tracing events


@pytest.mark.slow
def test_ray_refuses_what_it_cannot_place_or_reach(inputs):
    pytest.importorskip("ray", reason="Ray is in the test extra")
    start = time.monotonic()
    # 2 bundles of 1 CPU never fit a 1-CPU cluster: the shortest wait is as sure as a long one
    small = train(inputs, "ray-small", 2, None, "cluster.launcher=ray", "cluster.ray_num_cpus=1", "cluster.register_timeout_s=1")
    assert small.returncode == 2
    assert "Ray could not place 2 workers of {'CPU': 1} within cluster.register_timeout_s=1 s" in small.stderr
    assert "Traceback" not in small.stderr
    # in this process: the address is refused before Ray starts anything here (a fresh interpreter
    # would cost more than the check)
    away = posttrain("train", str(inputs / "run.yaml"), f"trainer.default_local_dir={inputs / 'ray-away'}",
                     "cluster.n_gpus_per_node=2", "cluster.ray_address=127.0.0.1:1", cwd=inputs)
    assert away.returncode == 2
    assert "cluster.ray_address (or RAY_ADDRESS) 127.0.0.1:1: nothing answers there" in away.stderr
    assert time.monotonic() - start < 120


def test_ray_keys_need_ray_workers(inputs):
    out = posttrain("train", str(inputs / "run.yaml"), f"trainer.default_local_dir={inputs / 'ray-keys'}",
                    "cluster.n_gpus_per_node=0", "cluster.ray_num_cpus=4", cwd=inputs)
    assert out.returncode == 2
    assert "cluster.ray_num_cpus: only act when Ray starts the workers, and this run has one process" in out.stderr


@pytest.mark.slow
def test_env_vars_reach_every_worker_and_each_writes_its_own_trace_of_a_profiled_step(inputs):
    seen, traces = inputs / "seen", inputs / "traces"
    seen.mkdir()
    reward = inputs / "env_reward.py"
    reward.write_text(
        "import os\n"
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        f"    with open(os.path.join({str(seen)!r}, str(os.getpid())), 'w') as f:\n"
        "        f.write(os.environ.get('POSTTRAIN_ENV_PROBE', 'unset'))\n"
        "    return 0.0\n"
    )
    out = train(inputs, "env", 2, None, "stages=[{name: rl}]", "trainer.total_training_steps=1", "trainer.save_freq=-1",
                f"reward.custom_reward_function.path={reward}", "reward.custom_reward_function.name=score",
                "cluster.env_vars={POSTTRAIN_ENV_PROBE: hello}",
                "profiler.tool=torch", "profiler.steps=[1]", f"profiler.save_path={traces}", "actor.profiler.enable=true",
                "actor.profiler.all_ranks=true")
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(p.read_text() for p in seen.iterdir()) == ["hello", "hello"]  # both workers scored, both saw it
    assert sorted(p.name for p in (traces / "rl" / "e2e").iterdir()) == ["step1_rank0.json", "step1_rank1.json"]
    for path in (traces / "rl" / "e2e").iterdir():
        named = {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "user_annotation"}
        assert {"gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "sync"} <= named, path.name
    rows = [json.loads(line) for line in (inputs / "env" / "metrics.jsonl").read_text().splitlines()]  # one stage
    step = [r for r in rows if "timing/step_s" in r][0]
    assert 0 < step["perf/mfu"] <= 1 and step["perf/peak_memory_gb_by_role/actor"] > 0
