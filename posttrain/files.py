"""Files: writing them so that a crash, a kill or a power loss never leaves a partial one behind,
and reading the text files a user writes (configs, data, templates, Python files) with one clear
error when they are not UTF-8.

A kill leaves whatever the kernel has; a power loss (or a crashed node of a network file system)
leaves only what was fsynced. A new name for a file is an entry in its directory, which is made
durable by fsyncing the directory, not the file: so every rename that commits something is
followed by an fsync of the directory holding the new name.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import tokenize
from pathlib import Path
from types import ModuleType
from typing import Callable

import yaml

# libyaml's C loader and dumper where PyYAML has them (its wheels do): the same documents as the pure-Python
# classes, about six times faster, and a run reads and writes its config.yaml several times.
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


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


_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def read_utf8(path: str | Path, error: Callable[[str], Exception]) -> str:
    """The text of a file the user wrote (config, data, template), which must be UTF-8.

    Read as bytes and decoded in one piece, so a bad byte is reported at its offset in the file
    (a text-mode read decodes in chunks and reports offsets within a chunk). A UTF-8 byte-order
    mark is dropped. Any other encoding raises ``error(message)`` (a `UserError`: the caller's kind
    of file) with a message naming the file, the byte offset and line, and the fix."""
    data = Path(path).read_bytes()
    skip = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(not_utf8_message(path, data, err.start + skip, err.reason)) from None


def not_utf8_message(path: str | Path, data: bytes, offset: int, reason: str) -> str:
    """``<file>: not UTF-8 text: byte 0xe9 at byte offset 5 (line 1) ...; re-save the file as UTF-8``."""
    line = data.count(b"\n", 0, offset) + 1
    utf16 = ", it looks like UTF-16" if data.startswith(_UTF16_BOMS) else ""
    return (
        f"{path}: not UTF-8 text: byte {data[offset]:#04x} at byte offset {offset} (line {line}) cannot be "
        f"decoded ({reason}{utf16}); re-save the file as UTF-8"
    )


def check_python_source(path: str | Path, error: Callable[[str], Exception]) -> None:
    """Refuse a Python file (a reward function, a dataset class) that is not in its declared
    encoding (UTF-8 unless a ``# -*- coding: ... -*-`` line says otherwise), before importing it:
    Python's own error for it is a SyntaxError without the offset or the fix."""
    data = Path(path).read_bytes()
    with open(path, "rb") as f:
        try:
            encoding, _ = tokenize.detect_encoding(f.readline)
        except SyntaxError:
            encoding = "utf-8"  # an unknown coding declaration: Python's import reports it
    if encoding in ("utf-8", "utf-8-sig"):
        read_utf8(path, error)
        return
    try:
        data.decode(encoding)
    except UnicodeDecodeError as err:
        raise error(f"{not_utf8_message(path, data, err.start, err.reason)} (or fix its coding line: {encoding})") from None


def import_python_file(
    path: str, kind: str, refuse: Callable[[str], Exception], failed: Callable[[BaseException], Exception]
) -> ModuleType:
    """Run a user's Python file (a reward function, a dataset class, an environment) as a module.

    The module is named after `kind` and a digest of the file's absolute path, since two files may
    share a basename, and stays in ``sys.modules`` so that the classes it defines pickle by reference
    (into worker processes too); a second import of the same file returns the same module. A path
    that is not a Python file raises ``refuse(message)``; an exception the file raises while it runs,
    ``SystemExit`` included, raises ``failed(exception)`` and leaves nothing registered.
    KeyboardInterrupt is let through."""
    if not os.path.isfile(path):
        raise refuse(f"file not found: {path}")
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:12]
    name = f"posttrain_user_{kind}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise refuse(f"{path} is not a Python file (is it a .py file?)")
    check_python_source(path, refuse)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as exc:  # a file that ends the process on import gets a message too
        del sys.modules[name]
        raise failed(exc) from exc
    return module


# ---- dataset folders and dataset names ------------------------------------------------------------
# Written here (the core layer) because the Trinity-RFT dialect resolves tasksets with them at load
# time and posttrain.data reads the same entries at build time.

SPLIT_FILE_EXTS = ("parquet", "jsonl", "json", "csv")
# A hub repository name: "org/name" or "name" (letters, digits, '-', '_', '.'), nothing path-like.
_HUB_NAME = re.compile(r"[\w][\w.-]*(/[\w][\w.-]*)?")


def is_hub_name(text: str) -> bool:
    """Whether `text` can name a Hugging Face repository (``openai/gsm8k``), rather than a path."""
    return bool(_HUB_NAME.fullmatch(text)) and not text.startswith(".")


def modelscope_cache() -> Path:
    """ModelScope's local hub cache: $MODELSCOPE_CACHE, else ~/.cache/modelscope/hub (the modelscope
    library's defaults)."""
    return Path(os.environ.get("MODELSCOPE_CACHE") or Path.home() / ".cache" / "modelscope" / "hub").expanduser()


def modelscope_model_dir(name: str) -> Path | None:
    """The directory of ModelScope model `name` (``org/name``) in the local ModelScope cache, or None.

    ``snapshot_download`` of the modelscope library writes a model to ``models/<org>/<name>`` under
    the cache, with each '.' of the name spelled '___' (``Qwen2___5-7B``); older releases wrote
    ``<org>/<name>``. A directory counts when it holds config.json. Never touches the network."""
    if not is_hub_name(name) or "/" not in name:
        return None
    org, model = name.split("/")
    root = modelscope_cache()
    for folder in (root / "models" / org / model.replace(".", "___"), root / "models" / org / model, root / org / model):
        if (folder / "config.json").is_file():
            return folder
    return None


def split_files(folder: str | Path, split: str, subset: str | None = None) -> list[str]:
    """The data files of one split in a dataset folder, in the layouts datasets are saved in:
    ``{split}.parquet`` (`posttrain data fetch`, `posttrain make-data`), ``{split}-00000-of-00001.parquet``
    and ``data/{split}-*.parquet`` (Hugging Face repositories), under ``{subset}/`` or
    ``data/{subset}/`` for a subset; likewise .jsonl/.json/.csv. Empty when there are none."""
    root = Path(folder)
    for prefix in ([subset, f"data/{subset}"] if subset else ["", "data"]):
        base = root / prefix if prefix else root
        for pattern in ("{split}.{ext}", "{split}-*.{ext}"):
            for ext in SPLIT_FILE_EXTS:
                found = sorted(str(f) for f in base.glob(pattern.format(split=split, ext=ext)))
                if found:
                    return found
    return []


def dataset_entry(path: str, subset: str | None, split: str | None) -> str:
    """The `data.train_files` entry of a dataset folder or hub dataset: ``PATH[:SUBSET][@SPLIT]``.

    >>> dataset_entry("openai/gsm8k", "main", "test"), dataset_entry("./gsm8k", None, "train")
    ('openai/gsm8k:main@test', './gsm8k@train')
    """
    return path + (f":{subset}" if subset else "") + (f"@{split}" if split else "")


def parse_dataset_entry(text: str) -> tuple[str, str | None, str | None]:
    """(path, subset, split) of ``PATH[:SUBSET][@SPLIT]``; a suffix holding '/' is part of the path.

    >>> parse_dataset_entry("openai/gsm8k:main@test"), parse_dataset_entry("data/x@2024/y")
    (('openai/gsm8k', 'main', 'test'), ('data/x@2024/y', None, None))
    """
    path, split = _split_suffix(text, "@")
    path, subset = _split_suffix(path, ":")
    return path, subset, split


def _split_suffix(text: str, sep: str) -> tuple[str, str | None]:
    head, found, tail = text.rpartition(sep)
    if not found or not head or not tail or "/" in tail:
        return text, None
    return head, tail


def import_user_module(where: str, kind: str, refuse: Callable[[str], Exception]) -> ModuleType:
    """A user's module named in a config: a Python file (``path/to/file.py``, run by
    `import_python_file`) or an importable module (``pkg.module``). Every failure raises
    ``refuse(message)``, the message naming the file or module."""
    if where.endswith(".py"):
        return import_python_file(where, kind, refuse, lambda e: refuse(f"importing {where} failed: {type(e).__name__}: {e}"))
    try:
        return importlib.import_module(where)
    except ImportError as e:
        raise refuse(f"cannot import module {where!r}: {e}") from e
