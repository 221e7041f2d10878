"""explorer.env_vars (Trinity-RFT's environment of its workflow runners) reach the processes that explore."""

from __future__ import annotations

import json
import os

from posttrain.cli import main
from posttrain.cli.train import _explorer_env
from posttrain.config import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

VAR = "POSTTRAIN_TEST_EXPLORER_VAR"


def test_a_process_that_explores_gets_the_variables_a_trainer_only_one_does_not(monkeypatch):
    monkeypatch.setenv(VAR, "unset")  # restored after the test
    monkeypatch.delenv("POSTTRAIN_DECOUPLED", raising=False)
    for overrides, expected in (
        ((), "7"),  # mode both, in step: this process generates
        (("trainer.mode=explore",), "7"),
        (("trainer.mode=train",), "unset"),  # the trainer half only
        (("synchronizer.sync_interval=2",), "unset"),  # the launcher of a decoupled run: its trainer half would inherit them
    ):
        os.environ[VAR] = "unset"
        _explorer_env(load_config(None, [f"explorer.env_vars={{{VAR}: 7}}", *overrides]))
        assert os.environ[VAR] == expected, overrides
    monkeypatch.setenv("POSTTRAIN_DECOUPLED", "explorer")  # ... and its explorer half sets them itself
    _explorer_env(load_config(None, [f"explorer.env_vars={{{VAR}: 7}}", "synchronizer.sync_interval=2"]))
    assert os.environ[VAR] == "7"


def test_the_reward_function_of_a_run_sees_the_variables(tmp_path, monkeypatch):
    monkeypatch.setenv(VAR, "0")  # restored after the test
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=16, seed=0)
    write_task_data("sort", tmp_path / "data", train=4, test=0, sft=0, dpo=0)
    (tmp_path / "reward.py").write_text(f"import os\n\ndef score(data_source, solution_str, ground_truth, extra_info=None):\n    return float(os.environ['{VAR}'])\n")
    base = [f"model.path={model}", f"data.train_files=[{tmp_path / 'data' / 'train.parquet'}]", "data.train_batch_size=2", "rollout.n=2",
            "data.max_response_length=4", "actor.ppo_mini_batch_size=2", "trainer.total_training_steps=1", "trainer.logger=[jsonl]",
            f"reward.custom_reward_function.path={tmp_path / 'reward.py'}", "reward.custom_reward_function.name=score"]
    (tmp_path / "run.yaml").write_text("trainer: {val_before_train: false}\n")
    run = tmp_path / "run"  # without the variable set by explorer.env_vars every score would be 0
    assert main(["train", str(tmp_path / "run.yaml"), *base, f"trainer.default_local_dir={run}", f"explorer.env_vars={{{VAR}: 0.75}}"]) == 0
    step = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    rewards = [v for k, v in step.items() if k.startswith("critic/score/mean") or k == "reward/mean"]
    assert rewards and all(r == 0.75 for r in rewards), step


def test_stages_must_agree_on_the_variables_of_the_process(monkeypatch):
    import pytest

    from posttrain.errors import ConfigError

    monkeypatch.setenv(VAR, "unset")
    cfg = load_config(None, [f"explorer.env_vars={{{VAR}: 7}}", f"stages=[{{name: a}}, {{name: b, explorer: {{env_vars: {{{VAR}: 8}}}}}}]"])
    with pytest.raises(ConfigError, match="explorer.env_vars: a stage gives other variables"):
        _explorer_env(cfg)
    assert os.environ[VAR] == "unset"
