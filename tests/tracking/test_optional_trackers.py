"""wandb, mlflow and swanlab log offline into a temporary directory: the run's config, the metrics at
their steps and the validation generations table are read back from what each client wrote, and no
connection leaves the machine."""

from __future__ import annotations

import json
import socket
import sys

import pytest
import yaml

from posttrain.errors import ConfigError
from posttrain.tracking import Generation, build_trackers, check_trackers
from tracker_files import swanlab_run, wandb_run

CONFIG = {"actor": {"optim": {"lr": 0.001}}, "trainer": {"logger": ["console", "wandb"]}, "derived": {"total_training_steps": 3}}
STEP1 = {"critic/score/mean": 0.25, "actor/pg_loss": -1.5}
STEP2 = {"critic/score/mean": 0.5, "val/score/mean": 0.75, "val/score/pass@2": 1.0}
SAMPLES = [Generation(2, "1+1=", "2", 1.0), Generation(2, "2+2=", "5", 0.0)]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Every client offline, its home-directory files in tmp_path, and every connection to a
    non-loopback address refused and recorded (the clients talk to their own helper process over
    loopback or a unix socket)."""
    for name, value in {
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb_cache"), "WANDB_DATA_DIR": str(tmp_path / "wandb_data"),
        "SWANLAB_MODE": "offline", "SWANLAB_SAVE_DIR": str(tmp_path / "swanlab_home"),
        "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",  # MLflow's usage reports
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("MLFLOW_TRACKING_URI", "WANDB_DIR", "SWANLAB_LOG_DIR", "WANDB_API_KEY", "SWANLAB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    attempts: list[object] = []

    def guard(original):
        def connect(sock, address, *args):
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not str(address[0]).startswith(("127.", "::1", "localhost")):
                attempts.append(address)
                raise OSError(f"test: no network ({address})")
            return original(sock, address, *args)
        return connect

    monkeypatch.setattr(socket.socket, "connect", guard(socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guard(socket.socket.connect_ex))
    yield attempts
    assert attempts == [], f"a tracker tried the network: {attempts}"


def _log_a_run(tmp_path, name, **options):
    run_dir = tmp_path / "run"
    trackers = build_trackers([name], run_dir, 3, project="proj", experiment="exp", config=CONFIG, options=options)
    trackers.log(STEP1, 1)
    trackers.log_generations(SAMPLES, 2)
    trackers.log(STEP2, 2)
    trackers.log_generations([Generation(3, "3+3=", "6", 1.0)], 3)
    trackers.close()
    return run_dir


def test_wandb_writes_config_metrics_and_generations_offline(offline, tmp_path):
    run = wandb_run(_log_a_run(tmp_path, "wandb", tags=["grpo"], notes="a note"))
    assert (run["project"], run["name"], run["tags"], run["notes"]) == ("proj", "exp", ["grpo"], "a note")
    assert run["config"]["actor"] == {"optim": {"lr": 0.001}} and run["config"]["derived"]["total_training_steps"] == 3
    assert {k: v for k, v in run["history"][1].items() if not k.startswith("val/generations")} == STEP1
    assert {k: v for k, v in run["history"][2].items() if not k.startswith("val/generations")} == STEP2
    assert run["tables"][2] == {"columns": ["step", "prompt", "response", "score"], "data": [[2, "1+1=", "2", 1.0], [2, "2+2=", "5", 0.0]]}
    assert run["tables"][3]["data"][-1] == [3, "3+3=", "6", 1.0] and len(run["tables"][3]["data"]) == 3  # every validation so far


def test_mlflow_writes_config_metrics_and_generations_to_a_file_store(offline, tmp_path):
    from mlflow.tracking import MlflowClient

    run_dir = _log_a_run(tmp_path, "mlflow", notes="a note")
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "proj"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert (run.info.run_name, run.info.status, run.data.tags["mlflow.note.content"]) == ("exp", "FINISHED", "a note")
    assert run.data.params["actor.optim.lr"] == "0.001" and run.data.params["trainer.logger"] == '["console", "wandb"]'
    history = {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)] for k in run.data.metrics}
    assert history["critic/score/mean"] == [(1, 0.25), (2, 0.5)] and history["actor/pg_loss"] == [(1, -1.5)]
    assert history["val/score/pass_at_2"] == [(2, 1.0)]  # '@' is not allowed in an MLflow name
    artifacts = run_dir / "mlruns" / experiment.experiment_id / run.info.run_id / "artifacts"
    table = json.loads((artifacts / "val_generations.json").read_text())
    assert table == {"columns": ["step", "prompt", "response", "score"],
                     "data": [[2, "1+1=", "2", 1.0], [2, "2+2=", "5", 0.0], [3, "3+3=", "6", 1.0]]}
    assert yaml.safe_load((artifacts / "config.yaml").read_text())["actor"] == {"optim": {"lr": 0.001}}


def test_swanlab_writes_config_metrics_and_generations_offline(offline, tmp_path):
    run = swanlab_run(_log_a_run(tmp_path, "swanlab") / "swanlog")
    assert (run["project"], run["name"]) == ("proj", "exp")
    assert run["config"]["actor"] == {"optim": {"lr": 0.001}} and run["config"]["derived"]["total_training_steps"] == 3
    assert run["scalars"] == {1: STEP1, 2: STEP2}
    assert run["tables"][2]["rowData"] == [{"step": 2, "prompt": "1+1=", "response": "2", "score": 1.0},
                                           {"step": 2, "prompt": "2+2=", "response": "5", "score": 0.0}]
    assert [c["field"] for c in run["tables"][2]["colDefs"]] == ["step", "prompt", "response", "score"]


def test_tracker_kwargs_name_the_run_and_move_its_files(offline, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    run_dir = _log_a_run(tmp_path, "wandb", project="other", experiment_name="renamed", logdir=str(elsewhere))
    assert not (run_dir / "wandb").exists()
    run = wandb_run(elsewhere)
    assert (run["project"], run["name"]) == ("other", "renamed")


class _Words:
    """A tokenizer stand-in: token id k decodes to the word wk."""

    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


def test_rollout_traces_go_to_the_mlflow_store_tagged_as_verl_tags_them(offline, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from posttrain.config import load_config
    from posttrain.tracking.rollout_traces import check_rollout_tracer, rollout_traces
    from posttrain.trainer.rollout_tracing import open_rollout_tracer

    cfg = load_config(None, ["rollout.trace.backend=mlflow", "rollout.trace.token2text=true", "trainer.project_name=proj",
                             "trainer.experiment_name=exp"])
    ctx = SimpleNamespace(cfg=cfg, world=SimpleNamespace(is_main=True), run_dir=tmp_path / "run")
    tracer = open_rollout_tracer(ctx, build_trackers([], tmp_path / "run", 3), _Words())
    groups, prompts, responses = ["u0", "u0", "u1", "u1", "u2", "u2"], [[1, 2]] * 2 + [[3]] * 2 + [[4]] * 2, [[5], [6, 7], [8], [9], [10], [11]]
    assert tracer.trace(groups, prompts, responses, [1.0, 0.0, 0.5, 0.5, 0.0, 1.0], step=3, validate=False) == 6
    client = MlflowClient(tracking_uri=(tmp_path / "run" / "mlruns").resolve().as_uri())
    traces = client.search_traces(locations=[client.get_experiment_by_name("proj").experiment_id])
    traces.sort(key=lambda t: (t.info.tags["sample_index"], t.info.tags["rollout_n"]))
    assert [(t.info.tags["step"], t.info.tags["sample_index"], t.info.tags["rollout_n"], t.info.tags["validate"]) for t in traces] == [
        ("3", "0", "0", "False"), ("3", "0", "1", "False"), ("3", "1", "0", "False"), ("3", "1", "1", "False"),
        ("3", "2", "0", "False"), ("3", "2", "1", "False")]
    second = traces[1].data.spans[0]
    assert second.inputs == {"prompt_ids": [1, 2], "prompt_text": "w1 w2"}
    assert second.outputs == {"response_ids": [6, 7], "score": 0.0, "response_text": "w6 w7"}
    # a limit of prompts keeps each chosen prompt's every response, the same ones for the same seed
    chosen = rollout_traces(groups, prompts, responses, [0.0] * 6, limit=2, seed=4)
    assert len(chosen) == 4 and len({t.sample_index for t in chosen}) == 2 and {t.rollout_n for t in chosen} == {0, 1}
    assert chosen == rollout_traces(groups, prompts, responses, [0.0] * 6, limit=2, seed=4)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ConfigError, match=r"rollout.trace.backend=mlflow: the mlflow package is not installed: pip install 'posttrain\[mlflow\]'"):
        check_rollout_tracer("mlflow")


def test_a_missing_package_is_one_error_with_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "swanlab", None)  # what an absent package looks like to the finder
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ConfigError) as err:
        check_trackers(["console", "wandb", "swanlab", "mlflow"], {})
    assert err.value.problems == [
        "trainer.logger: the wandb tracker needs the wandb package, which is not installed: "
        "pip install 'posttrain[wandb]' (or remove wandb from trainer.logger)",
        "trainer.logger: the swanlab tracker needs the swanlab package, which is not installed: "
        "pip install 'posttrain[swanlab]' (or remove swanlab from trainer.logger)",
    ]


@pytest.mark.parametrize("kwargs, message", [
    ({"api_key": "secret"}, "trainer.tracker_kwargs.api_key: credentials and server addresses are not taken from the config"),
    ({"uri": "file:/x"}, "trainer.tracker_kwargs.uri: read only by the mlflow tracker(s), and trainer.logger names none of them"),
    ({"colour": "red"}, "trainer.tracker_kwargs.colour: unknown tracker option"),
    ({"mode": "local"}, "trainer.tracker_kwargs.mode: wandb accepts mode online, offline, disabled, not 'local'"),
    ({"tags": "a"}, "trainer.tracker_kwargs.tags: expected a list of strings"),
    ({"name": "a", "experiment_name": "b"}, "trainer.tracker_kwargs.experiment_name: also given as trainer.tracker_kwargs.name"),
])
def test_tracker_options_are_checked_before_training(kwargs, message):
    with pytest.raises(ConfigError) as err:
        check_trackers(["console", "wandb"], kwargs)
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(message), err.value.problems


def test_tracker_kwargs_mode_makes_a_run_offline(offline, monkeypatch, tmp_path):
    import wandb

    monkeypatch.delenv("WANDB_MODE")
    wandb.teardown()  # wandb reads its environment once per process: forget the offline one of other tests
    trackers = build_trackers(["wandb"], tmp_path, 1, options={"mode": "offline"})
    trackers.log({"x": 1.0}, 1)
    trackers.close()
    assert wandb_run(tmp_path)["history"][1] == {"x": 1.0}


def test_a_training_run_sends_the_same_metrics_and_samples_to_every_tracker(offline, tmp_path):
    """`posttrain train` with all three trackers: each holds the run's resolved config, the metrics of
    metrics.jsonl at their steps and the samples of val_generations.jsonl."""
    from mlflow.tracking import MlflowClient

    from cli_run_helpers import tiny_run, write_config
    from posttrain.cli import main

    overrides = [*tiny_run(tmp_path), "trainer.total_training_steps=2", f"data.val_files={tmp_path / 'data' / 'test.parquet'}",
                 "trainer.log_val_generations=2", "trainer.test_freq=1", "trainer.logger=[jsonl,wandb,mlflow,swanlab]", "trainer.experiment_name=e2e",
                 "rollout.trace.backend=mlflow", "rollout.trace.max_samples_per_step_per_worker=1"]
    assert main(["train", str(write_config(tmp_path)), *overrides]) == 0
    run_dir = tmp_path / "run"
    jsonl = {r.pop("step"): r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    samples = [json.loads(line) for line in (run_dir / "val_generations.jsonl").read_text().splitlines()]
    assert sorted(jsonl) == [0, 1, 2] and len(samples) == 6  # validations before training, after steps 1 and 2

    wandb = wandb_run(run_dir)
    assert wandb["name"] == "e2e" and wandb["config"]["trainer"]["log_val_generations"] == 2
    for step, metrics in jsonl.items():
        logged = wandb["history"][step]
        assert all(logged[k] == pytest.approx(v) for k, v in metrics.items() if v is not None), step
    assert [[s["step"], s["prompt"], s["response"], s["score"]] for s in samples] == wandb["tables"][2]["data"]

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments() if e.name == "posttrain"])
    history = client.get_metric_history(run.info.run_id, "critic/score/mean")
    assert [(m.step, m.value) for m in history] == [(s, pytest.approx(jsonl[s]["critic/score/mean"])) for s in (1, 2)]
    assert run.data.params["trainer.log_val_generations"] == "2"
    # rollout.trace: the responses of one prompt per rollout (two training, three validation), in the tracker's run
    traces = client.search_traces(locations=[run.info.experiment_id])
    by_kind = {(t.info.tags["validate"], t.info.tags["step"]) for t in traces}
    assert by_kind == {("False", "1"), ("False", "2"), ("True", "0"), ("True", "1"), ("True", "2")}
    assert {t.info.request_metadata.get("mlflow.sourceRun") for t in traces} == {run.info.run_id}
    counts = {kind: sum((t.info.tags["validate"], t.info.tags["step"]) == kind for t in traces) for kind in by_kind}
    assert counts == {("False", "1"): 2, ("False", "2"): 2, ("True", "0"): 1, ("True", "1"): 1, ("True", "2"): 1}  # rollout.n 2, val n 1

    swan = swanlab_run(run_dir / "swanlog")
    assert swan["scalars"][2]["val/score/mean"] == pytest.approx(jsonl[2]["val/score/mean"])
    assert [row["response"] for row in swan["tables"][1]["rowData"]] == [s["response"] for s in samples[2:4]]
