"""Rerunning a finished run with a config that changes the work (the real CLI, as a user meets it):
refused with exit 2, the changed keys and both ways out named, nothing on disk touched; a change
of logging/output keys only still says the run is complete; the way out through
`trainer.resume_mode=resume_path` continues the finished stage to the new step count, exactly as
an uninterrupted run of that length; and continuing an earlier stage of a finished multi-stage run
is refused while a later stage's results (trained from its old final model) are still there."""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from cli_run_helpers import posttrain

from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

SFT = """
model: {{path: {m}}}
algorithm: {{kind: sft}}
data: {{train_files: [{d}/sft_train.parquet], train_batch_size: 8, max_length: 64}}
actor: {{ppo_micro_batch_size_per_gpu: 8, optim: {{lr: 1e-3}}}}
trainer: {{total_training_steps: {steps}, save_freq: 1, logger: [jsonl], default_local_dir: {r}}}
"""


def _cli(config: Path, *overrides: str) -> CompletedProcess:
    return posttrain("train", str(config), *overrides, cwd=config.parent)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerun")
    make_tiny_model(root / "model", layers=1, hidden=32, seed=0)
    write_task_data("sort", root / "data", train=8, test=0, sft=32, dpo=0, seed=0)
    return root


def _config(root: Path, name: str, steps: int, text: str = SFT) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(text.format(m=root / "model", d=root / "data", r=root / name, steps=steps))
    return path


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["sft/loss"]) for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]


def test_a_finished_run_rerun_with_more_steps_is_refused_and_the_way_out_continues_it(root):
    config = _config(root, "run", steps=3)
    assert _cli(config).returncode == 0
    run_dir = root / "run"
    before = _snapshot(run_dir)

    out = _cli(config, "trainer.total_training_steps=5", "actor.optim.lr=2e-3")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert f"stage 'main' in {run_dir} already finished with another config; these keys change what it computes:" in out.stderr
    assert "  actor.optim.lr: 0.001 -> 0.002\n  trainer.total_training_steps: 3 -> 5\n" in out.stderr
    last = run_dir / "checkpoints" / "global_step_3"
    assert f"trainer.resume_mode=resume_path trainer.resume_from_path={last}" in out.stderr
    assert "new run directory" in out.stderr
    assert _snapshot(run_dir) == before  # nothing touched

    # Output-only keys (where/how results are logged and checkpoints kept) do not change the work.
    same = _cli(config, "trainer.logger=[jsonl,console]", "trainer.max_actor_ckpt_to_keep=1", "trainer.experiment_name=x")
    assert same.returncode == 0, same.stderr[-3000:]
    assert "[main] stage already complete (3 steps)" in same.stdout and "the run is complete" in same.stdout

    # The first way out: continue the finished stage to 5 steps from its last checkpoint.
    cont = _cli(config, "trainer.total_training_steps=5", "trainer.resume_mode=resume_path", f"trainer.resume_from_path={last}")
    assert cont.returncode == 0, cont.stderr[-3000:]
    assert f"resuming from {last} (after step 3)" in cont.stdout
    assert _cli(_config(root, "ref5", steps=5)).returncode == 0
    assert _losses(run_dir) == _losses(root / "ref5")  # steps 1..5 once each, as a 5-step run


TWO = SFT + """stages:
  - name: first
    trainer: {{total_training_steps: {steps}}}
  - name: second
    trainer: {{total_training_steps: 2}}
"""


def test_continuing_an_earlier_stage_is_refused_while_a_later_stage_holds_results(root):
    config = _config(root, "two", steps=2, text=TWO)
    assert _cli(config).returncode == 0
    run_dir = root / "two"
    before = _snapshot(run_dir)
    changed = _config(root, "two", steps=3, text=TWO)  # the first stage now has 3 steps
    out = _cli(changed)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "stage 'first'" in out.stderr and "trainer.total_training_steps: 2 -> 3" in out.stderr
    first_last = run_dir / "first" / "checkpoints" / "global_step_2"
    out = _cli(changed, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={first_last}")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"stage 'first' is about to train, but {run_dir / 'second'} holds the results of a later stage" in out.stderr
    assert _snapshot(run_dir) == before


def test_which_keys_change_the_work_and_a_config_saved_by_an_older_version(tmp_path):
    from posttrain.config import load_config, save_resolved
    from posttrain.trainer.stage import changed_keys, changes_the_work

    cfg = load_config(None, ["trainer.total_training_steps=3"])
    saved = save_resolved(cfg, tmp_path)
    assert changed_keys(saved, cfg) == []
    # A key added to the schema after the run was saved reads as its default: no change.
    import yaml

    tree = yaml.safe_load(saved.read_text())
    del tree["trainer"]["log_freq"], tree["trainer"]["seed"]
    saved.write_text(yaml.safe_dump(tree))
    assert changed_keys(saved, cfg) == []
    other = load_config(None, ["trainer.total_training_steps=4", "trainer.seed=7", "trainer.logger=[jsonl]"])
    changed = {k: (old, new) for k, old, new in changed_keys(saved, other)}
    assert changed == {"trainer.total_training_steps": (3, 4), "trainer.seed": (42, 7),
                       "trainer.logger": (["console", "jsonl", "tensorboard"], ["jsonl"])}
    assert [k for k in changed if changes_the_work(k)] == ["trainer.seed", "trainer.total_training_steps"]
    assert not changes_the_work("actor.checkpoint.save_contents") and changes_the_work("actor.optim.lr")
    assert not changes_the_work("cluster.n_gpus_per_node") and not changes_the_work("trainer.balance_batch")
