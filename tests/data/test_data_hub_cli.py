"""Models and datasets by Hugging Face name through the real command line, offline from local caches
under HF_HOME, and `posttrain data fetch`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_run_helpers import TINY_RL, assert_user_error, write_config
from hub_cache_helpers import hub_repo, prepared_dataset

from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

TESTS = Path(__file__).resolve().parents[1]

# HF_HOME is read when huggingface_hub and datasets are imported, so the commands of a test run in a
# fresh interpreter, which runs them one after the other as `posttrain` (cli_run_helpers.posttrain in
# that process). Its start-up, importing torch, transformers' model classes and datasets, is ~10 s of
# CPU on a busy CI machine: one interpreter per test, not one per command.
RUN_COMMANDS = """
import json, sys
from pathlib import Path
from cli_run_helpers import posttrain
commands = json.loads(sys.argv[1])
outs = [posttrain(*args, cwd=Path.cwd()) for args in commands]
print("\\0RESULTS" + json.dumps([[o.returncode, o.stdout, o.stderr] for o in outs]))
"""


def commands(*commands: list[str], cwd: Path) -> list[subprocess.CompletedProcess]:
    """Each of `commands` (the arguments of `posttrain`), run in order in one fresh interpreter with
    this process's environment; their exit statuses and output, as if each were its own process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", RUN_COMMANDS, json.dumps([list(c) for c in commands])], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "\0RESULTS" in run.stdout, run.stderr[-3000:]
    results = json.loads(run.stdout.rsplit("\0RESULTS", 1)[1])
    return [subprocess.CompletedProcess(c, code, out, err) for c, (code, out, err) in zip(commands, results)]


pytest.importorskip("datasets", reason="the datasets extra: pip install 'posttrain[datasets]'")

HF_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HF_DATASETS_CACHE",
                "HUGGINGFACE_HUB_CACHE")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """HF_HOME of the subprocesses (hub cache HF_HOME/hub, datasets cache HF_HOME/datasets); no
    offline switch set, so any offline behaviour is posttrain's own."""
    for name in HF_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf"


def test_names_in_the_caches_train_and_names_not_in_them_are_one_error_each(tmp_path, home):
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    hub_repo(home / "hub", "model", "acme/tiny-model", {p.name: p for p in model.iterdir() if p.is_file()})
    data = write_task_data("sort", tmp_path / "data", train=8, test=4, sft=0, dpo=0)
    hub_repo(home / "hub", "dataset", "acme/sort", {"data/train-00000-of-00001.parquet": data["train"],
                                                    "data/test-00000-of-00001.parquet": data["test"]})
    config = write_config(tmp_path)
    names = ["model.path=acme/tiny-model", "data.train_files=acme/sort", "data.val_files=acme/sort"]
    plan, run, no_dataset, no_model = commands(
        ["config", "plan", str(config), *names, *TINY_RL],
        ["train", str(config), *names, *TINY_RL, f"trainer.default_local_dir={tmp_path / 'run'}"],
        ["config", "plan", str(config), f"model.path={model}", "data.train_files=acme/absent", *TINY_RL],
        ["config", "plan", str(config), "model.path=acme/absent-model", f"data.train_files={data['train']}", *TINY_RL],
        cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "8 rows / data.train_batch_size 4" in " ".join(plan.stdout.split())  # the train split, read by name
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert (tmp_path / "run" / "final_model" / "config.json").is_file()
    # Names the caches do not hold: one error each, saying how to get a local copy.
    assert_user_error(no_dataset, "data.train_files: acme/absent@train is not a local file or folder",
                      "`posttrain data fetch acme/absent OUT`")
    assert_user_error(no_model, "model path 'acme/absent-model' is not an existing local directory", "`hf download acme/absent-model`")


def test_fetch_writes_every_split_as_parquet(tmp_path, home, monkeypatch):
    data = write_task_data("sort", tmp_path / "data", train=8, test=4, sft=0, dpo=0)
    hub_repo(home / "hub", "dataset", "acme/sort", {"main/train.parquet": data["train"], "main/test.parquet": data["test"]})
    prepared_dataset(home / "datasets", home / "hub", "acme/sort", "main", {"train": "main/train.parquet", "test": "main/test.parquet"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # this machine has no Hub: the cache a connected fetch would fill is read
    out, one, absent = commands(["data", "fetch", "acme/sort", "--subset", "main", str(tmp_path / "out")],
                                ["data", "fetch", "acme/sort", "--subset", "main", "--split", "test", str(tmp_path / "one")],
                                ["data", "fetch", "acme/absent", str(tmp_path / "none")], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "wrote acme/sort (subset main): train 8 rows, test 4 rows" in out.stdout
    for split in ("train", "test"):
        assert pq.read_table(tmp_path / "out" / f"{split}.parquet").to_pylist() == pq.read_table(data[split]).to_pylist()
    assert one.returncode == 0 and sorted(p.name for p in (tmp_path / "one").iterdir()) == ["test.parquet"]
    assert_user_error(absent, "cannot load the dataset acme/absent (offline: HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set")
