"""The trackers other frameworks name translate to posttrain's (verl's trainer.logger, ROLL's
track_with/tracker_kwargs, Trinity-RFT's monitor), the ones posttrain lacks are refused with the reason,
and `posttrain train` stops before training when a tracker's package is missing."""

from __future__ import annotations

import sys

import pytest

from cli_run_helpers import tiny_run, write_config
from posttrain.cli import main
from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.config.sections.trainer import REFUSED_LOGGERS


def test_verl_roll_and_trinity_trackers_translate():
    native, _ = translate({"trainer": {"logger": ["console", "file", "wandb", "mlflow"]}}, "verl")
    assert native["trainer"]["logger"] == ["console", "jsonl", "wandb", "mlflow"]  # verl's file logger: metrics.jsonl
    native, _ = translate({"track_with": "swanlab", "tracker_kwargs": {"project": "p", "logdir": "/tmp/x", "tags": ["a"]}}, "roll")
    assert native["trainer"]["logger"] == ["console", "jsonl", "swanlab"]
    assert native["trainer"]["tracker_kwargs"] == {"project": "p", "logdir": "/tmp/x", "tags": ["a"]}
    native, _ = translate({"track_with": "stdout"}, "roll")
    assert native["trainer"]["logger"] == ["console", "jsonl"]
    native, _ = translate({"monitor": {"monitor_type": "mlflow", "monitor_args": {"uri": "file:/tmp/m"}}}, "trinity")
    assert (native["trainer"]["logger"], native["trainer"]["tracker_kwargs"]) == (["console", "jsonl", "mlflow"], {"uri": "file:/tmp/m"})


@pytest.mark.parametrize("name", sorted(REFUSED_LOGGERS))
def test_trackers_posttrain_lacks_are_refused_with_the_reason(name):
    _, report = translate({"trainer": {"logger": ["console", name]}}, "verl")
    entry = report.entry("trainer.logger")
    assert entry.status == "refused" and entry.reason == f"the {name} tracker: {REFUSED_LOGGERS[name]}"


def test_a_native_config_names_the_new_trackers_and_their_options(tmp_path):
    path = write_config(tmp_path, "trainer:\n  logger: [console, wandb, mlflow, swanlab]\n  tracker_kwargs: {mode: offline, uri: 'file:/tmp/m'}\n")
    cfg = load_config(path)
    assert cfg.trainer.logger == ["console", "wandb", "mlflow", "swanlab"] and cfg.trainer.tracker_kwargs["mode"] == "offline"


def test_train_stops_before_training_when_a_tracker_package_is_missing(tmp_path, monkeypatch, capsys):
    overrides = tiny_run(tmp_path)
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    status = main(["train", str(write_config(tmp_path)), *overrides, "trainer.logger=[console,wandb]"])
    err = capsys.readouterr().err
    assert status == 2 and "the wandb tracker needs the wandb package, which is not installed: pip install 'posttrain[wandb]'" in err
    assert not (tmp_path / "run").exists()  # refused before the run directory was made
