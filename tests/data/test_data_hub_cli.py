"""Models and datasets by Hugging Face name through the real command line, offline from local caches
under HF_HOME, and `posttrain data fetch`."""

from __future__ import annotations

from functools import partial

import pyarrow.parquet as pq
import pytest
from cli_run_helpers import TINY_RL, assert_user_error, posttrain, write_config
from hub_cache_helpers import hub_repo, prepared_dataset

from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

# HF_HOME is read when huggingface_hub and datasets are imported: each command runs in a fresh process.
posttrain = partial(posttrain, subprocess=True)

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


def test_train_with_model_and_dataset_by_name(tmp_path, home):
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    hub_repo(home / "hub", "model", "acme/tiny-model", {p.name: p for p in model.iterdir() if p.is_file()})
    data = write_task_data("sort", tmp_path / "data", train=8, test=4, sft=0, dpo=0)
    hub_repo(home / "hub", "dataset", "acme/sort", {"data/train-00000-of-00001.parquet": data["train"],
                                                    "data/test-00000-of-00001.parquet": data["test"]})
    config = write_config(tmp_path)
    names = ["model.path=acme/tiny-model", "data.train_files=acme/sort", "data.val_files=acme/sort"]
    plan = posttrain("config", "plan", str(config), *names, *TINY_RL, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "8 rows / data.train_batch_size 4" in " ".join(plan.stdout.split())  # the train split, read by name
    run = posttrain("train", str(config), *names, *TINY_RL, f"trainer.default_local_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr


def test_names_not_in_the_caches_are_one_error_each(tmp_path, home):
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    config = write_config(tmp_path)
    out = posttrain("config", "plan", str(config), f"model.path={model}", "data.train_files=acme/absent", *TINY_RL, cwd=tmp_path)
    assert_user_error(out, "data.train_files: acme/absent@train is not a local file or folder",
                      "`posttrain data fetch acme/absent OUT`")
    write_task_data("sort", tmp_path / "data", train=8, test=4, sft=0, dpo=0)
    out = posttrain("config", "plan", str(config), "model.path=acme/absent-model", f"data.train_files={tmp_path}/data/train.parquet",
                    *TINY_RL, cwd=tmp_path)
    assert_user_error(out, "model path 'acme/absent-model' is not an existing local directory", "`hf download acme/absent-model`")


def test_fetch_writes_every_split_as_parquet(tmp_path, home, monkeypatch):
    data = write_task_data("sort", tmp_path / "data", train=8, test=4, sft=0, dpo=0)
    hub_repo(home / "hub", "dataset", "acme/sort", {"main/train.parquet": data["train"], "main/test.parquet": data["test"]})
    prepared_dataset(home / "datasets", home / "hub", "acme/sort", "main", {"train": "main/train.parquet", "test": "main/test.parquet"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # this machine has no Hub: the cache a connected fetch would fill is read
    out = posttrain("data", "fetch", "acme/sort", "--subset", "main", str(tmp_path / "out"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "wrote acme/sort (subset main): train 8 rows, test 4 rows" in out.stdout
    for split in ("train", "test"):
        assert pq.read_table(tmp_path / "out" / f"{split}.parquet").to_pylist() == pq.read_table(data[split]).to_pylist()
    out = posttrain("data", "fetch", "acme/sort", "--subset", "main", "--split", "test", str(tmp_path / "one"), cwd=tmp_path)
    assert out.returncode == 0 and sorted(p.name for p in (tmp_path / "one").iterdir()) == ["test.parquet"]
    out = posttrain("data", "fetch", "acme/absent", str(tmp_path / "none"), cwd=tmp_path)
    assert_user_error(out, "cannot load the dataset acme/absent (offline: HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set")
