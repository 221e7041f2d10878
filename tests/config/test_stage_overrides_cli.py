"""Per-stage overrides through the real CLI: `stages.<index or name>.<key>=value` changes that stage
of the run, and a problem in a command-line value names the override as typed, not the YAML file."""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import CompletedProcess

from cli_run_helpers import posttrain

from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

REPO = Path(__file__).resolve().parents[2]

TWO = """
model: {{path: {m}}}
algorithm: {{kind: sft}}
data: {{train_files: [{d}/sft_train.parquet], train_batch_size: 8, max_length: 64}}
actor: {{ppo_micro_batch_size_per_gpu: 8}}
trainer: {{total_training_steps: 2, logger: [jsonl], default_local_dir: {r}}}
stages:
  - name: first
  - name: second
"""


def _cli(*args: str) -> CompletedProcess:
    return posttrain(*args, cwd=REPO)


def test_a_stage_override_changes_that_stage_of_the_run(tmp_path):
    make_tiny_model(tmp_path / "model", layers=1, hidden=32, seed=0)
    write_task_data("sort", tmp_path / "data", train=8, test=0, sft=16, dpo=0, seed=0)
    config = tmp_path / "two.yaml"
    config.write_text(TWO.format(m=tmp_path / "model", d=tmp_path / "data", r=tmp_path / "run"))
    out = _cli("train", str(config), "stages.second.trainer.total_training_steps=1", "stages.0.actor.optim.lr=1e-3")
    assert out.returncode == 0, out.stderr[-3000:]
    steps = {s: [json.loads(x)["step"] for x in (tmp_path / "run" / s / "metrics.jsonl").read_text().splitlines()] for s in ("first", "second")}
    assert steps == {"first": [1, 2], "second": [3]}  # the second stage ran the 1 step it was given
    saved = (tmp_path / "run" / "first" / "config.yaml").read_text()
    assert "    lr: 0.001\n" in saved and "total_training_steps: 2\n" in saved


def test_command_line_problems_name_the_override_as_typed(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"trainer: {{default_local_dir: {tmp_path / 'run'}}}\nstages:\n  - name: a\n  - name: b\n")
    out = _cli("config", "show", str(config), "stages.b.trainer.total_training_steps=0")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr == ("posttrain: error: invalid configuration: command line override "
                          "'stages.b.trainer.total_training_steps=0': stages[1].trainer.total_training_steps: must be >= 1, got 0\n")
    # Found after loading, by the run driver: still the override, not the file.
    out = _cli("train", str(config), "trainer.resume_mode=resume_path")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr == ("posttrain: error: invalid configuration: command line override 'trainer.resume_mode=resume_path': "
                          "trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N checkpoint directory)\n")
    assert not (tmp_path / "run").exists()
