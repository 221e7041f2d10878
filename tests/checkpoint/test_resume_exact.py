"""The acceptance test of exact resume: a run SIGKILLed mid-training and resumed by rerunning the same
command logs the same per-step metrics and ends with bit-identical weights as an uninterrupted run.

The killed run is the real CLI in a process of its own (the `POSTTRAIN_TEST_KILL` hook SIGKILLs it at
a chosen step, after the step or in the middle of a save), forked from posttrain's fork server
(tests/fork_run_helpers.py), so it skips a fresh interpreter's 5-10 s of imports; the uninterrupted and the
resumed runs call the same CLI entry point in-process. All runs use one torch thread,
so CPU kernels reduce in the same order everywhere.
"""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest
import torch
from fork_run_helpers import posttrain_forked
from safetensors.torch import load_file

from posttrain.checkpoint import KILL_ENV, MARKER
from posttrain.cli import main as cli_main
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

# Metrics that measure time differ between any two runs; everything else must match exactly.
TIMING_PREFIXES = ("timing/", "perf/")

RL = """
data: {{train_files: {d}/train.parquet, val_files: {d}/test.parquet, train_batch_size: 8, max_prompt_length: 32, max_response_length: 6}}
model: {{path: {m}}}
rollout: {{n: 4}}
actor: {{ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 16, shuffle: true, optim: {{lr: 1e-3}}}}
trainer: {{total_training_steps: {steps}, test_freq: 2, save_freq: 1, max_actor_ckpt_to_keep: 2, logger: [jsonl, tensorboard], default_local_dir: {r}}}
"""

TWO_STAGES = RL + """stages:
  - name: sft
    algorithm: {{kind: sft}}
    data: {{train_files: {d}/sft_train.parquet, val_files: [], train_batch_size: 8}}
    actor: {{ppo_micro_batch_size_per_gpu: 8}}
    trainer: {{total_training_steps: 3}}
  - name: rl
"""


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    model = make_tiny_model(root / "model", layers=2, hidden=64, seed=0)
    # 24 prompts in batches of 8: an epoch is 3 steps, so step 3 ends the first epoch.
    write_task_data("sort", root / "data", train=24, test=8, sft=32, dpo=0, seed=0)
    return root, model


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _write(root: Path, name: str, template: str, steps: int) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(template.format(d=root / "data", m=root / "model", r=root / name, steps=steps))
    return path


def _train_in_process(config: Path, capsys) -> str:
    assert cli_main(["train", str(config)]) == 0
    return capsys.readouterr().out


def _train_killed(config: Path, kill: str) -> None:
    """`posttrain train CONFIG` in a process of its own (tests/fork_run_helpers.py), with one torch
    thread, SIGKILLed by the test hook at `kill`."""
    out = posttrain_forked("train", str(config), cwd=config.parent, timeout=600, env={"OMP_NUM_THREADS": "1", KILL_ENV: kill})
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]


def _metrics(stage_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (stage_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING_PREFIXES)} for r in rows]


def _assert_same_run(expected: Path, resumed: Path) -> None:
    a, b = _metrics(expected), _metrics(resumed)
    assert [r["step"] for r in b] == [r["step"] for r in a]  # no step lost, none logged twice
    assert a == b
    wa = load_file(str(expected / "final_model" / "model.safetensors"))
    wb = load_file(str(resumed / "final_model" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _tensorboard(stage_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one scalar as TensorBoard shows it: every event file of the stage, with the
    events a resumed run's purge marker supersedes dropped (as TensorBoard's own reader does)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(stage_dir / "tensorboard"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_rl_killed_at_the_epoch_boundary_resumes_exactly(assets, one_thread, capsys):
    root, _ = assets
    _train_in_process(_write(root, "rl_ref", RL, 5), capsys)
    resumed = _write(root, "rl_killed", RL, 5)
    _train_killed(resumed, "main:3:after_step")  # step 3 is the last step of epoch 0
    ckpts = root / "rl_killed" / "checkpoints"
    assert (ckpts / MARKER).read_text().strip() == "3"
    out = _train_in_process(resumed, capsys)
    assert "resuming from" in out and "global_step_3 (after step 3)" in out
    _assert_same_run(root / "rl_ref", root / "rl_killed")
    epochs = [r["training/epoch"] for r in _metrics(root / "rl_killed") if "training/epoch" in r]
    assert epochs == [0.0, 0.0, 0.0, 1.0, 1.0]  # the resumed run went on into epoch 1
    # Keep-last-2: the actor of older checkpoints is gone, the last two are complete.
    assert sorted(p.name for p in ckpts.iterdir() if p.is_dir()) == ["global_step_4", "global_step_5"]
    assert (ckpts / "global_step_5" / "actor" / "optimizer.pt").is_file()
    # Rerunning a finished run does nothing but say so.
    again = _train_in_process(resumed, capsys)
    assert "[main] stage already complete (5 steps)" in again
    assert len(_metrics(root / "rl_killed")) == 6  # validation at 0 + 5 steps, unchanged


def test_two_stage_run_killed_during_a_save_resumes_in_the_second_stage(assets, one_thread, capsys):
    root, _ = assets
    steps = 4
    kill_at = random.Random(int(os.environ.get("POSTTRAIN_TEST_SEED", "0"))).randint(2, steps)
    _train_in_process(_write(root, "two_ref", TWO_STAGES, steps), capsys)
    resumed = _write(root, "two_killed", TWO_STAGES, steps)
    _train_killed(resumed, f"rl:{kill_at}:before_marker")
    rl_ckpts = root / "two_killed" / "rl" / "checkpoints"
    # The save of step kill_at was killed before its marker: the previous checkpoint is the resume point.
    assert (rl_ckpts / f"global_step_{kill_at}").is_dir()
    assert (rl_ckpts / MARKER).read_text().strip() == str(kill_at - 1)
    sft_before = (root / "two_killed" / "sft" / "metrics.jsonl").read_text()
    out = _train_in_process(resumed, capsys)
    assert "[sft] stage already complete (3 steps)" in out
    assert f"[rl] resuming from {rl_ckpts / f'global_step_{kill_at - 1}'} (after step {kill_at - 1})" in out
    assert (root / "two_killed" / "sft" / "metrics.jsonl").read_text() == sft_before  # stage 1 not rerun
    for stage in ("sft", "rl"):
        _assert_same_run(root / "two_ref" / stage, root / "two_killed" / stage)
    assert _metrics(root / "two_killed" / "rl")[0]["step"] == 3  # the RL stage continues SFT's step count
    # TensorBoard: the step logged before the kill (its checkpoint never completed) is superseded by
    # the resumed run's, so the curve has each step once, with the uninterrupted run's values.
    killed_files = list((root / "two_killed" / "rl" / "tensorboard").glob("events.out.tfevents.*"))
    assert len(killed_files) == 2  # the killed run's file and the resumed run's
    expected = _tensorboard(root / "two_ref" / "rl", "actor/pg_loss")
    assert len(expected) == steps and _tensorboard(root / "two_killed" / "rl", "actor/pg_loss") == expected


DPO = """
data: {{train_files: {d}/dpo_train.parquet, val_files: {d}/dpo_test.parquet, train_batch_size: 8, max_length: 64}}
model: {{path: {m}}}
actor: {{ppo_micro_batch_size_per_gpu: 4, optim: {{lr: 1e-3}}}}
algorithm: {{kind: dpo, dpo: {{beta: 0.1}}}}
trainer: {{total_training_steps: {steps}, test_freq: 2, save_freq: 2, logger: [jsonl], default_local_dir: {r}}}
"""


def test_dpo_killed_mid_run_resumes_exactly(assets, one_thread, capsys, tmp_path):
    root, model = assets
    # 16 pairs in batches of 8: an epoch is 2 steps; killed after step 3 (checkpoint of step 2), so
    # the resumed run redoes step 3 and crosses into epoch 2 at step 5.
    write_task_data("sort", root / "dpo_data", train=16, test=8, sft=0, dpo=16, seed=1)
    template = DPO.replace("{d}", str(root / "dpo_data"))
    _train_in_process(_write(root, "dpo_ref", template, 5), capsys)
    resumed = _write(root, "dpo_killed", template, 5)
    _train_killed(resumed, "main:3:after_step")
    assert (root / "dpo_killed" / "checkpoints" / MARKER).read_text().strip() == "2"
    out = _train_in_process(resumed, capsys)
    assert "(after step 2)" in out
    _assert_same_run(root / "dpo_ref", root / "dpo_killed")


def test_resuming_with_a_changed_config_names_the_changed_keys(assets, one_thread, capsys):
    root, _ = assets
    config = _write(root, "changed", RL, 3)
    _train_killed(config, "main:2:after_step")
    out = _train_in_process(config, capsys)
    assert "config changed" not in out  # same config: nothing to say
    config.write_text(config.read_text().replace("total_training_steps: 3", "total_training_steps: 4").replace("lr: 1e-3", "lr: 2e-3"))
    (root / "changed" / "stage_complete.json").unlink()  # let the finished stage resume from step 3
    out = _train_in_process(config, capsys)
    assert "[main] config changed since this stage started (2 keys); the resumed run uses the new values:" in out
    assert "actor.optim.lr: 0.001 -> 0.002" in out
    assert "trainer.total_training_steps: 3 -> 4" in out
