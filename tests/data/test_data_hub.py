"""Dataset folders and Hugging Face datasets by name in data.train_files / val_files, read offline from
real local caches (tests/hub_cache_helpers.py builds them as a connected machine leaves them)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_helpers import chatml_ids
from hub_cache_helpers import hub_repo, prepared_dataset

from posttrain.config.dialects import translate
from posttrain.config.sections.data import DataConfig
from posttrain.data import build_rl_dataset, build_sft_dataset
from posttrain.errors import DataError

datasets = pytest.importorskip("datasets", reason="the datasets extra: pip install 'posttrain[datasets]'")

TRAIN = [{"question": "1+1", "answer": "2"}, {"question": "2+2", "answer": "4"}]
TEST = [{"question": "3+3", "answer": "6"}]
CFG = DataConfig(prompt_key="question", response_key="answer")


def _questions(ds) -> list[str]:
    return [ds[k].prompt for k in range(len(ds))]


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """Empty hub and datasets caches of this test, where the libraries look (HF_HUB_CACHE, HF_DATASETS_CACHE)."""
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    return tmp_path / "hub", tmp_path / "datasets"


# The dataset card of a repository with subsets: its YAML header maps each subset's splits to files.
CARD = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: other
  data_files:
  - split: train
    path: other/train-*
---
"""


def _hub_dataset(tmp_path, hub_cache, name="acme/tiny", card=True):
    """`name` in the hub cache in a Hugging Face repository's layout: subset folders, and the card."""
    pq.write_table(pa.Table.from_pylist(TRAIN), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(TEST), tmp_path / "test.parquet")
    (tmp_path / "README.md").write_text(CARD)
    files = {"main/train-00000-of-00001.parquet": tmp_path / "train.parquet",
             "main/test-00000-of-00001.parquet": tmp_path / "test.parquet",
             "other/train-00000-of-00001.parquet": tmp_path / "test.parquet"}
    hub_repo(hub_cache, "dataset", name, {**files, **({"README.md": tmp_path / "README.md"} if card else {})})


def test_save_to_disk_folder_by_split(tmp_path, tokenizer):
    folder = tmp_path / "disk"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(TRAIN), "test": datasets.Dataset.from_list(TEST)}).save_to_disk(folder)
    train = build_rl_dataset(CFG, str(folder), tokenizer)
    assert _questions(train) == ["1+1", "2+2"] and train[1].ground_truth == "4"
    assert train[0].prompt_ids == chatml_ids(("user", "1+1"), generation_prompt=True)
    assert _questions(build_rl_dataset(CFG, f"{folder}@test", tokenizer)) == ["3+3"]
    assert _questions(build_rl_dataset(CFG, [str(folder)], tokenizer, split="val")) == ["3+3"]  # val_files: test
    with pytest.raises(DataError, match=r"disk@valid: no split 'valid'; the folder has \['test', 'train'\]"):
        build_rl_dataset(CFG, f"{folder}@valid", tokenizer)
    single = tmp_path / "single"
    datasets.Dataset.from_list(TEST).save_to_disk(single)
    assert _questions(build_rl_dataset(CFG, str(single), tokenizer)) == ["3+3"]


def test_split_folder_dataset_dir_and_row_labels(tmp_path, tokenizer):
    folder = tmp_path / "root" / "gsm"
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(TRAIN), folder / "data" / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist([{"question": 5, "answer": "x"}]), folder / "data" / "test-00000-of-00001.parquet")
    cfg = DataConfig(prompt_key="question", response_key="answer", dataset_dir=str(tmp_path / "root"))
    assert _questions(build_rl_dataset(cfg, "gsm", tokenizer)) == ["1+1", "2+2"]
    with pytest.raises(DataError, match=r"test-00000-of-00001.parquet: row 0, column 'question'"):  # the file's own row
        build_rl_dataset(cfg, "gsm@test", tokenizer)
    with pytest.raises(DataError, match=r"gsm@valid: the folder has no 'valid' split"):
        build_rl_dataset(cfg, "gsm@valid", tokenizer)


def test_hub_name_from_the_datasets_cache(tmp_path, caches, tokenizer):
    hub_cache, data_cache = caches
    _hub_dataset(tmp_path, hub_cache)
    prepared_dataset(data_cache, hub_cache, "acme/tiny", "main", {"train": "main/train-00000-of-00001.parquet",
                                                                   "test": "main/test-00000-of-00001.parquet"})
    for repo in hub_cache.iterdir():  # only the datasets cache is left: load_dataset(NAME) resolves it offline
        __import__("shutil").rmtree(repo)
    assert _questions(build_rl_dataset(CFG, "acme/tiny:main@test", tokenizer)) == ["3+3"]
    assert _questions(build_rl_dataset(CFG, "acme/tiny", tokenizer)) == ["1+1", "2+2"]  # the one cached subset, train
    with pytest.raises(DataError, match=r"acme/tiny:other@train: Couldn't find cache for acme/tiny for config 'other' Available configs in the cache: \['main'\]"):
        build_rl_dataset(CFG, "acme/tiny:other", tokenizer)
    with pytest.raises(DataError, match=r"acme/tiny:main@valid: Unknown split \"valid\""):
        build_rl_dataset(CFG, "acme/tiny:main@valid", tokenizer)


def test_hub_name_from_the_hub_cache(tmp_path, caches, tokenizer):
    hub_cache, _ = caches
    _hub_dataset(tmp_path, hub_cache)
    assert _questions(build_rl_dataset(CFG, "acme/tiny:main", tokenizer, split="val")) == ["3+3"]
    assert _questions(build_rl_dataset(CFG, "acme/tiny:other", tokenizer)) == ["3+3"]
    _hub_dataset(tmp_path, hub_cache, "acme/nocard", card=False)  # no card: the subset's folder and split files
    assert _questions(build_rl_dataset(CFG, "acme/nocard:main@train", tokenizer)) == ["1+1", "2+2"]
    with pytest.raises(DataError, match=r"acme/tiny:main@valid: the hub cache's copy .* has no such subset or split"):
        build_rl_dataset(CFG, "acme/tiny:main@valid", tokenizer)


def test_a_name_not_cached_says_how_to_fetch_it(caches, tokenizer):
    with pytest.raises(DataError) as err:
        build_rl_dataset(CFG, "acme/absent:main", tokenizer)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("data.train_files: acme/absent:main@train is not a local file or folder, and the dataset 'acme/absent' is in neither local Hugging Face cache")
    assert "run `posttrain data fetch acme/absent --subset main OUT`, then set data.train_files to OUT/train.parquet" in message
    with pytest.raises(DataError, match=r"data.train_files: '/no/such/folder' is not a data file, a dataset folder or a dataset name"):
        build_rl_dataset(CFG, "/no/such/folder", tokenizer)


def test_trinity_taskset_path_subset_and_split(tmp_path, caches, tokenizer):
    hub_cache, _ = caches
    _hub_dataset(tmp_path, hub_cache)
    taskset = {"path": "acme/tiny", "subset_name": "main", "split": "test", "format": {"prompt_key": "question", "response_key": "answer"}}
    native, _ = translate({"buffer": {"explorer_input": {"taskset": taskset}}}, "trinity")
    assert native["data"]["train_files"] == ["acme/tiny:main@test"]
    cfg = DataConfig(**native["data"])
    assert _questions(build_rl_dataset(cfg, cfg.train_files, tokenizer)) == ["3+3"]


def test_sft_rows_by_name(tmp_path, caches, tokenizer):
    hub_cache, _ = caches
    _hub_dataset(tmp_path, hub_cache)
    sft = build_sft_dataset(DataConfig(prompt_key="question", response_key="answer", max_length=64), "acme/tiny:main", tokenizer)
    assert len(sft) == 2 and sft[0].input_ids == chatml_ids(("user", "1+1"), ("assistant", "2"))


def test_a_subset_missing_from_the_datasets_cache_comes_from_the_hub_cache(tmp_path, caches, tokenizer):
    hub_cache, data_cache = caches
    _hub_dataset(tmp_path, hub_cache)
    prepared_dataset(data_cache, hub_cache, "acme/tiny", "main", {"train": "main/train-00000-of-00001.parquet"})
    assert _questions(build_rl_dataset(CFG, "acme/tiny:main", tokenizer)) == ["1+1", "2+2"]
    assert _questions(build_rl_dataset(CFG, "acme/tiny:other", tokenizer)) == ["3+3"]  # only the hub cache has it
