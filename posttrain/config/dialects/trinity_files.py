"""Where a Trinity-RFT taskset or buffer's ``path`` + ``split`` + ``subset_name`` points, as posttrain data entries."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects.machine import ABSENT_DATA
from posttrain.config.dialects.translate import Context
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


# StorageConfig fields Trinity-RFT's validator fills itself ("DO NOT SET"): what a file writes there is overwritten
_SET_BY_TRINITY = {"total_epochs": "buffer.total_epochs", "total_steps": "buffer.total_steps"}


def storage_fields(ctx: Context, prefix: str, item: Mapping[str, Any]) -> None:
    """A taskset's or experience buffer's ``index`` (the read offset Trinity-RFT continues a run
    from) and the fields its validator sets from ``buffer.*``."""
    for name, source in _SET_BY_TRINITY.items():
        if name in item:
            ctx.consume(f"{prefix}.{name}")
            ctx.drop(f"{prefix}.{name}", f"set by Trinity-RFT itself from {source} where it reads it (\"DO NOT SET\" in its StorageConfig)")
    if "index" in item:
        ctx.consume(f"{prefix}.index")
        if item["index"] == 0 and not isinstance(item["index"], bool):
            ctx.drop(f"{prefix}.index", "0: reading starts at the first row, as posttrain's does")
        else:
            ctx.refuse(f"{prefix}.index", "a read offset for continuing a run by hand: posttrain continues a run from its checkpoint "
                                          "(trainer.resume_mode), which restores where its sampler stood", None, item["index"])
