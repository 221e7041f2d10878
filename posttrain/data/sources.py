"""Entries of `data.train_files` / `data.val_files`: data files, dataset folders and hub datasets.

    train.parquet              a data file (parquet, jsonl, json, csv: posttrain.data.files)
    ./gsm8k                    a folder: `Dataset.save_to_disk` output, or split files
                               (train.parquet, train-00000-of-00001.parquet, data/train-*.parquet)
    openai/gsm8k               a Hugging Face dataset by name
    openai/gsm8k:main@test     ... its subset (configuration) `main`, split `test`
    ./gsm8k@test               a folder's split

Without ``@SPLIT`` an entry of train_files reads the ``train`` split and one of val_files ``test``.
Relative paths start at `data.dataset_dir` when it is set (ROLL's `dataset_dir` + `file_name`).

Hub datasets are read offline whatever HF_HUB_OFFLINE / HF_DATASETS_OFFLINE say, as models are:
`datasets.load_dataset(NAME, SUBSET, split=SPLIT)` from the datasets cache (HF_DATASETS_CACHE, what
`load_dataset` left on a connected machine), else the dataset's snapshot in the hub cache
(HF_HUB_CACHE, what `hf download NAME --repo-type dataset` leaves). A name in neither is one
DataError saying how to fetch it: `posttrain data fetch NAME OUT` on a connected machine.
Rows of a folder or a hub dataset are labelled ``ENTRY@SPLIT`` in messages (`... row 3, column 'q'`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from posttrain.data.files import FORMATS, RowTable, read_rows
from posttrain.errors import DataError
from posttrain.files import dataset_entry, is_hub_name, parse_dataset_entry, split_files

# The split an entry without @SPLIT reads, by the setting it comes from.
DEFAULT_SPLITS = {"data.train_files": "train", "data.val_files": "test"}
INSTALL = "pip install 'posttrain[datasets]'"


def load_table(entries: Iterable[str], *, setting: str, base_dir: str | None = None) -> RowTable:
    """Every row of every entry, in order, in one RowTable; an empty setting, an entry that names
    nothing readable or one without rows is a DataError naming it."""
    entries = list(entries)
    if not entries:
        raise DataError(f"{setting} is empty; give at least one data file (parquet, jsonl, json, csv), dataset folder or dataset name")
    table = RowTable(rows=[])
    for k, entry in enumerate(entries):
        for label, rows in read_entry(entry, setting=setting, base_dir=base_dir):
            table.append(label, rows, setting, entry=k)
    return table


def read_entry(entry: str, *, setting: str, base_dir: str | None = None,
               default_split: str | None = None) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(label, rows) of each file the entry stands for. A folder or dataset name without its own
    ``@split`` reads `default_split`, else the setting's default split; a data file is its own split."""
    entry = os.path.expanduser(entry)
    local = os.path.join(base_dir, entry) if base_dir and not os.path.isabs(entry) else entry
    if os.path.splitext(entry)[1].lower() in FORMATS or os.path.isfile(local):
        yield local, read_rows(local)  # a data file (read_rows names a missing or bad one)
        return
    path, subset, split = (local, None, None) if os.path.isdir(local) else parse_dataset_entry(entry)
    split = split or default_split or DEFAULT_SPLITS.get(setting, "train")
    folder = os.path.join(base_dir, path) if base_dir and not os.path.isabs(path) else path
    if os.path.isdir(folder):
        yield from _folder(folder, subset, split)
    elif is_hub_name(path):
        yield dataset_entry(path, subset, split), _hub_rows(path, subset, split, setting)
    else:
        raise DataError(f"{setting}: {entry!r} is not a data file, a dataset folder or a dataset name; check the path "
                        f"(relative paths start at the working directory or data.dataset_dir)")


def _folder(folder: str, subset: str | None, split: str) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A `save_to_disk` folder's split, else the split files of a dataset folder."""
    label = dataset_entry(folder, subset, split)
    if any(os.path.isfile(os.path.join(folder, name)) for name in ("dataset_dict.json", "state.json")):
        if subset is not None:
            raise DataError(f"{label}: a save_to_disk folder has splits but no subsets; drop ':{subset}'")
        yield label, _disk_rows(folder, split, label)
        return
    files = split_files(folder, split, subset)
    if not files:
        raise DataError(f"{label}: the folder has no {split!r} split: no save_to_disk files (dataset_dict.json, state.json) "
                        f"and no {split}.parquet/.jsonl/.json/.csv, {split}-*.parquet or data/{split}-*.parquet"
                        + (f" under {subset}/" if subset else ""))
    for path in files:
        yield path, read_rows(path)


def _disk_rows(folder: str, split: str, label: str) -> list[dict[str, Any]]:
    datasets = _datasets(label)
    loaded = datasets.load_from_disk(folder)
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DataError(f"{label}: no split {split!r}; the folder has {sorted(loaded)}: write {folder}@SPLIT")
        loaded = loaded[split]
    return loaded.to_list()


def _hub_rows(name: str, subset: str | None, split: str, setting: str) -> list[dict[str, Any]]:
    """The rows of a hub dataset's split from the local caches (never the network)."""
    label = dataset_entry(name, subset, split)
    datasets = _datasets(label)
    with _offline(datasets):
        try:
            return datasets.load_dataset(name, subset, split=split).to_list()
        except (ValueError, ConnectionError, FileNotFoundError) as err:  # not cached, or not this subset or split
            cache_error = err
        snapshot = _hub_snapshot(name)
        if snapshot is None:
            if isinstance(cache_error, ValueError):  # the datasets cache holds the dataset, not what was asked
                raise DataError(f"{label}: {_first_lines(cache_error)}") from cache_error
            raise DataError(_missing(name, subset, split, setting, datasets))
        try:  # the repository's README says which files make each subset and split
            return datasets.load_dataset(str(snapshot), subset, split=split).to_list()
        except (ValueError, FileNotFoundError) as err:
            files = split_files(snapshot, split, subset)  # a repository without that card: SUBSET/SPLIT-*.parquet
            if not files:
                raise DataError(f"{label}: the hub cache's copy ({snapshot}) has no such subset or split: {_first_lines(err)}") from err
            return [row for path in files for row in read_rows(path)]


def _missing(name: str, subset: str | None, split: str, setting: str, datasets: Any) -> str:
    import huggingface_hub.constants as hub

    fetch = f"posttrain data fetch {name}" + (f" --subset {subset}" if subset else "") + " OUT"
    return (f"{setting}: {dataset_entry(name, subset, split)} is not a local file or folder, and the dataset {name!r} is in "
            f"neither local Hugging Face cache ({datasets.config.HF_DATASETS_CACHE}, {hub.HF_HUB_CACHE}); posttrain reads "
            f"datasets offline: on a connected machine run `{fetch}`, then set {setting} to OUT/{split}.parquet")


def _hub_snapshot(name: str) -> Path | None:
    """The dataset's snapshot folder in the hub cache, or None."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, repo_type="dataset", local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError):
        return None


@contextlib.contextmanager
def _offline(datasets: Any) -> Iterator[None]:
    """Hub libraries offline and quiet for the duration. Their offline switches are read from the
    environment when they are imported (transformers imports huggingface_hub before any config is
    read), so the module settings themselves are flipped, and restored afterwards."""
    import huggingface_hub.constants as hub

    saved = (hub.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE,
             datasets.logging.get_verbosity(), datasets.utils.are_progress_bars_disabled())
    hub.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    datasets.logging.set_verbosity_error()  # "using the latest cached version" is what we asked for
    datasets.utils.disable_progress_bars()
    try:
        yield
    finally:
        hub.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE, verbosity, bars_off = saved
        datasets.logging.set_verbosity(verbosity)
        if not bars_off:
            datasets.utils.enable_progress_bars()


def _datasets(label: str) -> Any:
    try:
        import datasets
    except ImportError as err:
        raise DataError(f"{label}: reading a dataset folder or dataset name needs the datasets package: {INSTALL}") from err
    return datasets


def _first_lines(err: Exception) -> str:
    return " ".join(str(err).split("\n")[:2]).strip()
