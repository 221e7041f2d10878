"""`posttrain config show|explain|plan` through the real CLI entry point."""

from __future__ import annotations

import subprocess
import sys

import yaml

from posttrain.cli import main
from posttrain.cli.config_cmd import split_args
from posttrain.models.tiny import make_tiny_model

CONFIG = """
data: {train_batch_size: 8, max_prompt_length: 64, max_response_length: 64, train_files: [train.jsonl]}
rollout: {n: 4}
actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8, use_dynamic_bsz: false, ppo_epochs: 2}
algorithm: {adv_estimator: grpo}
cluster: {nnodes: 1, n_gpus_per_node: 0}
trainer: {total_epochs: 2, total_training_steps: null}
"""


def write_config(tmp_path):
    """The config with its data (relative to tmp_path, the working directory of a run) and a tiny model."""
    (tmp_path / "train.jsonl").write_text('{"prompt": "q"}\n' * 20)
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4)
    path = tmp_path / "exp.yaml"
    path.write_text(CONFIG + f"model: {{path: {model}}}\n")
    return path


def test_split_args():
    assert split_args(["a.yaml", "x.y=1"]) == ("a.yaml", ["x.y=1"])
    assert split_args(["x.y=1"]) == (None, ["x.y=1"])
    assert split_args([]) == (None, [])


def test_show_prints_the_resolved_config_with_overrides(tmp_path, capsys):
    assert main(["config", "show", str(write_config(tmp_path)), "actor.ppo_epochs=3"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["actor"]["ppo_epochs"] == 3 and shown["rollout"]["n"] == 4
    assert "optim" in shown["actor"]  # every default is included


def test_show_reports_errors_with_exit_status_2(tmp_path, capsys):
    assert main(["config", "show", str(write_config(tmp_path)), "actor.ppo_epoch=3"]) == 2
    assert capsys.readouterr().err == (
        "posttrain: error: invalid configuration: command line override 'actor.ppo_epoch=3': actor.ppo_epoch: unknown key; did you mean "
        "actor.ppo_epochs?\n"
    )


def test_explain_key_section_and_unknown(capsys):
    assert main(["config", "explain", "actor.ppo_epochs"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("actor.ppo_epochs\n") and "  type:     int\n" in out
    assert main(["config", "explain", "actor"]) == 0
    assert "  ppo_epochs " in capsys.readouterr().out
    assert main(["config", "explain"]) == 0
    assert "  actor " in capsys.readouterr().out
    assert main(["config", "explain", "actor.ppo_epoch"]) == 2
    assert "did you mean actor.ppo_epochs?" in capsys.readouterr().err


def test_plan_counts_the_rows_of_the_loaded_dataset(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative data paths start at the working directory, as for train
    assert main(["config", "plan", str(write_config(tmp_path))]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert "optimizer steps per rollout 4 (2 mini-batches × actor.ppo_epochs 2)" in lines
    assert "steps per epoch 2 (20 rows / data.train_batch_size 8, last partial batch dropped)" in lines
    assert "total training steps 4 (× trainer.total_epochs 2)" in lines


def test_plan_refuses_relative_data_train_would_not_find(tmp_path, capsys, monkeypatch):
    path = write_config(tmp_path)
    monkeypatch.chdir("/")
    assert main(["config", "plan", str(path)]) == 2
    assert "train.jsonl: data file not found" in capsys.readouterr().err


def test_plan_prints_each_stage(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_config(tmp_path)
    path.write_text(path.read_text() + "stages:\n  - {name: short, actor: {ppo_epochs: 1}}\n  - {name: long}\n")
    assert main(["config", "plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("stage 0 (short):\n") and "\nstage 1 (long):\n" in out


def test_python_m_posttrain_config_plan_exit_status(tmp_path):
    path = write_config(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "posttrain", "config", "plan", str(path), "actor.ppo_mini_batch_size=3"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "data.train_batch_size (8) is not divisible by actor.ppo_mini_batch_size (3)" in result.stderr


def test_train_names_the_source_of_problems_found_after_loading(tmp_path, capsys):
    # dpo is a registered loss the RL actor cannot use: the stage's own check refuses it, and the
    # message names where the value came from like load-time problems do: the override as typed...
    path = write_config(tmp_path)
    code = main(["train", str(path), "actor.policy_loss.loss_mode=dpo", f"trainer.default_local_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "command line override 'actor.policy_loss.loss_mode=dpo': actor.policy_loss.loss_mode=dpo" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    # ... or the file.
    path.write_text(path.read_text().replace("ppo_epochs: 2}", "ppo_epochs: 2, policy_loss: {loss_mode: dpo}}"))
    code = main(["train", str(path), f"trainer.default_local_dir={tmp_path / 'run'}"])
    assert code == 2
    assert f"{path}: actor.policy_loss.loss_mode=dpo" in capsys.readouterr().err
