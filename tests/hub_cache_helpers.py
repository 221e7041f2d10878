"""Local Hugging Face caches laid out as a connected machine leaves them, built without a network (a
module name no other test folder uses).

- `hub_repo`: a repository in the hub cache (HF_HUB_CACHE) as `hf download` / `snapshot_download`
  write it: the bytes under blobs/, the snapshot's files as symlinks to them, refs/main naming the
  revision.
- `prepared_dataset`: a dataset in the datasets cache (HF_DATASETS_CACHE) as an online
  `load_dataset(NAME, SUBSET)` leaves it: the parquet builder it runs, with the repository and
  revision it names, reading the data files from the hub cache. The one network call of that path,
  the Hub's answer that the revision exists, is answered yes; everything else (the file downloads,
  served by the hub cache offline; the arrow files, dataset_info.json and cache folders) is the
  libraries' own code.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from unittest import mock

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_repo(hub_cache: Path, repo_type: str, name: str, files: dict[str, Path]) -> Path:
    """Put `files` ({path in the repo: local file}) in the hub cache as repository `name` of
    `repo_type` (model or dataset); returns the snapshot folder."""
    folder = hub_cache / f"{repo_type}s--{name.replace('/', '--')}"
    snapshot = folder / "snapshots" / REVISION
    for rel, source in files.items():
        data = Path(source).read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(REVISION)
    return snapshot


def prepared_dataset(datasets_cache: Path, hub_cache: Path, name: str, subset: str, split_files: dict[str, str]) -> None:
    """Prepare `name`'s subset in the datasets cache from its hub-cache files ({split: path in the
    repository}), as `load_dataset(name, subset)` does online."""
    import huggingface_hub.constants as hub
    from datasets.data_files import DataFilesDict
    from datasets.load import configure_builder_class
    from datasets.packaged_modules.parquet.parquet import Parquet, ParquetConfig
    from huggingface_hub import HfFileSystem

    base = f"hf://datasets/{name}@{REVISION}"
    files = DataFilesDict({split: [f"{base}/{path}"] for split, path in split_files.items()})
    builder_cls = configure_builder_class(Parquet, [ParquetConfig(name=subset, data_files=files)], subset, name.split("/")[-1])
    builder = builder_cls(cache_dir=str(datasets_cache), repo_id=name, dataset_name=name.split("/")[-1],
                          config_name=subset, hash=REVISION, base_path=base)
    with mock.patch.object(hub, "HF_HUB_CACHE", str(hub_cache)), mock.patch.object(hub, "HF_HUB_OFFLINE", True), \
            mock.patch.object(HfFileSystem, "_repo_and_revision_exist", return_value=(True, None)):
        builder.download_and_prepare()
