"""Where a Trinity-RFT taskset or buffer's ``path`` + ``split`` + ``subset_name`` points, as posttrain data entries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posttrain.config.dialects.machine import ABSENT_DATA
from posttrain.files import SPLIT_FILE_EXTS, dataset_entry, is_hub_name, split_files


class AbsentData(ValueError):
    """A taskset path that is not on this machine; ``entry`` is what it reads where it is (the path
    itself for a data file, else ``PATH[:SUBSET]@SPLIT``, which the data layer resolves then)."""

    def __init__(self, message: str, entry: str):
        super().__init__(message)
        self.entry = entry


def data_files(path: Any, split: str, subset: str | None = None) -> list[str]:
    """The `data.*_files` entries of one taskset split, or ValueError saying why there are none: a
    local file; the split's files in a local folder; else a ``PATH[:SUBSET]@SPLIT`` entry that the
    data layer reads when the dataset is built (a save_to_disk folder, or a Hugging Face dataset
    name read from the local cache: posttrain.data.sources)."""
    if not isinstance(path, str) or not path or "${" in path:
        raise ValueError(f"path {path!r} is not a local file, a folder or a dataset name")
    p = Path(path).expanduser()
    if p.is_file():
        if subset is not None:
            raise ValueError(f"subset_name {subset!r} names a configuration of a dataset folder or hub dataset; {path} is one file")
        return [path]
    if p.is_dir():
        found = split_files(p, split, subset)
        return found if found else [dataset_entry(path, subset, split)]
    if is_hub_name(path):
        return [dataset_entry(path, subset, split)]
    is_file = p.suffix.lstrip(".") in SPLIT_FILE_EXTS and subset is None
    raise AbsentData(
        f"{path!r} {ABSENT_DATA}; posttrain reads local files "
        f"and cached datasets and never downloads: save the dataset locally (`posttrain data fetch NAME OUT`) and point path there",
        path if is_file else dataset_entry(path, subset, split),
    )
