"""A checkpoint's manifest: every file in it with its size and SHA-256, and how a checkpoint is verified.

`manifest.json` is written after every file of `global_step_N.tmp/` is written and fsynced, and
before the directory is renamed and the marker names it. It lists whatever files are there (every
role, every process's shards), so verifying needs no list of expected files. Resume verifies a
checkpoint before trusting it: a file missing, of another size, or with another checksum than at
save time (truncated by a full disk, garbled by a bad copy, flipped by a failing drive) makes it
damaged, and the caller falls back to an older one.

A checkpoint written before manifests existed has none: it is checked for completeness only (JSON
parses, safetensors headers match the file size, `torch.save` zip archives pass their CRC test),
which catches truncation but not every garbled byte.

Hashing reads every byte (SHA-256 runs at about 1 GB/s per core), so files are hashed on several
threads at once (hashlib releases the GIL on large buffers).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from posttrain.files import atomic_write_text

MANIFEST = "manifest.json"
ALGORITHM = "sha256"


@dataclass(frozen=True)
class Verdict:
    """What verifying a checkpoint found: `damage` names the first bad file (relative) and what is
    wrong, or is None; `has_manifest` is False for a checkpoint written before manifests."""

    damage: tuple[str, str] | None
    has_manifest: bool

    @property
    def intact(self) -> bool:
        return self.damage is None


def _digest(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, ALGORITHM).hexdigest()


def _digests(paths: list[Path]) -> list[str]:
    workers = max(1, min(8, os.cpu_count() or 1, len(paths)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_digest, paths))


def _files(ckpt_dir: Path) -> list[Path]:
    return sorted(p for p in ckpt_dir.rglob("*") if p.is_file() and p.relative_to(ckpt_dir).as_posix() != MANIFEST)


def write_manifest(ckpt_dir: Path) -> Path:
    """List every file under `ckpt_dir` (but the manifest) with its size and checksum, atomically.
    Call once every file of the checkpoint is written (by every process) and fsynced."""
    files = _files(ckpt_dir)
    entries = {
        p.relative_to(ckpt_dir).as_posix(): {"size": p.stat().st_size, ALGORITHM: digest}
        for p, digest in zip(files, _digests(files))
    }
    text = json.dumps({"format": 1, "algorithm": ALGORITHM, "files": entries}, indent=1, sort_keys=True) + "\n"
    return atomic_write_text(ckpt_dir / MANIFEST, text)


def verify_checkpoint(ckpt_dir: Path) -> Verdict:
    """Check `ckpt_dir` against its manifest, or its files' structure when it has none."""
    path = ckpt_dir / MANIFEST
    if not path.is_file():
        return Verdict(_structure_damage(ckpt_dir), has_manifest=False)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        entries = manifest["files"] if manifest.get("algorithm") == ALGORITHM else None
        return Verdict(_manifest_damage(ckpt_dir, entries), has_manifest=True)
    except (ValueError, KeyError, TypeError, AttributeError):
        return Verdict((MANIFEST, "unreadable (not the manifest written at save time)"), has_manifest=True)


def _manifest_damage(ckpt_dir: Path, entries: dict) -> tuple[str, str] | None:
    present: list[tuple[str, Path]] = []
    for rel, entry in sorted(entries.items()):
        file = ckpt_dir / rel
        if not file.is_file():
            return rel, "missing"
        size = file.stat().st_size
        if size != entry["size"]:  # cheap, and the common damage (a truncated write or copy)
            return rel, f"{size} bytes, {entry['size']} when it was saved"
        present.append((rel, file))
    for (rel, _), digest in zip(present, _digests([f for _, f in present])):
        if digest != entries[rel][ALGORITHM]:
            return rel, "its checksum differs from the one written at save time"
    return None


def _structure_damage(ckpt_dir: Path) -> tuple[str, str] | None:
    """For a checkpoint without a manifest: the first file whose structure shows it is incomplete."""
    for file in _files(ckpt_dir):
        rel = file.relative_to(ckpt_dir).as_posix()
        problem = _structure_problem(file)
        if problem:
            return rel, problem
    return None


def _structure_problem(file: Path) -> str | None:
    try:
        if file.suffix == ".json":
            json.loads(file.read_text(encoding="utf-8"))
        elif file.suffix == ".safetensors":
            return _safetensors_problem(file)
        elif file.suffix == ".pt":
            with zipfile.ZipFile(file) as archive:
                bad = archive.testzip()
            return f"its record {bad} fails its CRC check" if bad else None
    except (ValueError, OSError, zipfile.BadZipFile) as err:
        return f"unreadable ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
    return None


def _safetensors_problem(file: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then the tensors' bytes; the
    header's largest data offset says how long the file must be."""
    size = file.stat().st_size
    with open(file, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{size} bytes, too short for a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if 8 + length > size:
            return f"{size} bytes, shorter than its own header says"
        header = json.loads(fh.read(length))
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + length + end != size:
        return f"{size} bytes, {8 + length + end} by its own header"
    return None
