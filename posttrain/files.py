"""Writing files so that a crash, a kill or a power loss never leaves a partial one behind.

A kill leaves whatever the kernel has; a power loss (or a crashed node of a network file system)
leaves only what was fsynced. A new name for a file is an entry in its directory, which is made
durable by fsyncing the directory, not the file: so every rename that commits something is
followed by an fsync of the directory holding the new name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` so that a reader sees the old file or the new one, never a part:
    a temporary file in the same directory, flushed to disk, then `os.replace`. Returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)  # the new name itself survives a power loss
    return path


def fsync_dir(path: str | Path) -> None:
    """Make the entries of directory `path` (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file under `root`, then every directory, deepest first (a directory after the
    entries it holds). Files written by libraries (safetensors, torch.save) are only flushed to the
    kernel when they close; this is what puts them on the disk."""
    for dirpath, _, filenames in os.walk(root, topdown=False):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)  # Linux and macOS flush a file's dirty pages through any descriptor
            finally:
                os.close(fd)
        fsync_dir(dirpath)
