"""`posttrain data fetch`: save a Hugging Face dataset as posttrain reads it, on a connected machine.

Training never downloads (posttrain.data.sources reads dataset names from the local caches only), so
getting a hub dataset onto a training machine is a step of its own: `fetch_dataset` loads the dataset
with `datasets.load_dataset` (from the Hub, or from the local cache when HF_HUB_OFFLINE /
HF_DATASETS_OFFLINE is set) and writes one parquet file per split, ``OUT/{split}.parquet``, the
files `data.train_files` / `data.val_files` name, and the layout a dataset folder entry reads.
"""

from __future__ import annotations

import os
from pathlib import Path

from posttrain.data.sources import INSTALL
from posttrain.errors import DataError


def fetch_dataset(name: str, out: str | Path, *, subset: str | None = None, split: str | None = None) -> dict[str, tuple[Path, int]]:
    """Write every split of `name` (or only `split`) to ``out/{split}.parquet``; returns
    {split: (file, rows)}. A file appears whole or not at all (written aside, then renamed)."""
    try:
        import datasets
    except ImportError as err:
        raise DataError(f"posttrain data fetch needs the datasets package: {INSTALL}") from err
    label = name + (f" (subset {subset})" if subset else "")
    try:
        loaded = datasets.load_dataset(name, subset, split=split)
    except (OSError, ValueError) as err:  # not found, unreachable, unknown subset or split
        offline = " (offline: HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set, so only the local cache was read)" if datasets.config.HF_HUB_OFFLINE else ""
        first = " ".join(str(err).split("\n")[:2]).strip()
        raise DataError(f"cannot load the dataset {label}{offline}: {first}") from err
    splits = {split: loaded} if split is not None else dict(loaded)
    folder = Path(out).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for split_name, table in splits.items():
        path = folder / f"{split_name}.parquet"
        partial = folder / f".{split_name}.parquet.partial"
        table.to_parquet(str(partial))
        os.replace(partial, path)
        written[split_name] = (path, len(table))
    return written
