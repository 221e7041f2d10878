"""What reaches the disk before the marker names a checkpoint: every file and directory entry of it
is fsynced first, so a power loss after the marker cannot leave it naming empty or missing files;
and the manifest written with it, which resume verifies (tests/checkpoint/test_damaged_checkpoints.py
meets the same faults through the CLI)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.checkpoint import MARKER, CheckpointError, Parts, Role, prune, save_checkpoint
from posttrain.checkpoint.manifest import MANIFEST, verify_checkpoint, write_manifest
from posttrain.checkpoint.resume import resumable_checkpoint, verified
from posttrain.models.tiny import make_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = make_tiny_model(tmp_path_factory.mktemp("durable") / "model", layers=1, hidden=32, seed=0)
    return path, AutoTokenizer.from_pretrained(path)


def _parts(model_dir, tokenizer) -> Parts:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return Parts({"actor": Role(model, torch.optim.AdamW(model.parameters()), None, tokenizer)})


def test_every_file_and_directory_is_fsynced_before_the_marker_names_it(tiny, tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    fsync, replace, rename = os.fsync, os.replace, os.rename

    def record_fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return fsync(fd)

    def record(kind, real):
        def wrapper(src, dst, *args, **kwargs):
            events.append((kind, str(dst)))
            return real(src, dst, *args, **kwargs)
        return wrapper

    monkeypatch.setattr(os, "fsync", record_fsync)
    monkeypatch.setattr(os, "replace", record("replace", replace))
    monkeypatch.setattr(os, "rename", record("rename", rename))
    root = tmp_path.resolve()
    final = save_checkpoint(root, 3, _parts(*tiny), {})

    marker_at = events.index(("replace", str(root / MARKER)))
    renamed_at = events.index(("rename", str(final)))
    # A file written by atomic_write_text is fsynced under its temporary name, then replaced.
    synced_before_rename = {Path(p) for kind, p in events[:renamed_at] if kind in ("fsync", "replace")}
    tmp = final.with_name(final.name + ".tmp")
    written = [p for p in final.rglob("*")]
    assert any(p.name == "model.safetensors" for p in written) and any(p.name == "optimizer.pt" for p in written)
    for path in written:  # files and subdirectories, synced under their name in the .tmp directory
        assert tmp / path.relative_to(final) in synced_before_rename, path
    assert tmp in synced_before_rename
    # The checkpoint's own entry in the root is synced after its rename and before the marker names
    # it; the marker's entry after its replace.
    root_syncs = [i for i, (kind, p) in enumerate(events) if kind == "fsync" and Path(p) == root]
    assert any(renamed_at < i < marker_at for i in root_syncs)
    assert any(i > marker_at for i in root_syncs)


def test_the_manifest_lists_every_file_and_catches_each_kind_of_damage(tiny, tmp_path):
    path = save_checkpoint(tmp_path, 1, _parts(*tiny), {})
    manifest = json.loads((path / MANIFEST).read_text())
    on_disk = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(manifest["files"]) == on_disk and "actor/optimizer.pt" in on_disk
    assert all(e["size"] == (path / f).stat().st_size for f, e in manifest["files"].items())
    assert verify_checkpoint(path).intact
    (path / "actor" / "shard_rank1.pt").write_bytes(b"written by another process")  # no fixed list of files:
    write_manifest(path)  # whatever is in the directory when the manifest is written is covered
    assert "actor/shard_rank1.pt" in json.loads((path / MANIFEST).read_text())["files"]

    def damaged(name: str, change) -> tuple[str, str]:
        copy = tmp_path / name / "global_step_1"
        shutil.copytree(path, copy)
        change(copy / "actor" / "optimizer.pt")
        verdict = verify_checkpoint(copy)
        assert not verdict.intact and verdict.has_manifest
        return verdict.damage

    assert damaged("gone", Path.unlink) == ("actor/optimizer.pt", "missing")
    size = (path / "actor" / "optimizer.pt").stat().st_size
    rel, why = damaged("short", lambda f: f.write_bytes(f.read_bytes()[:-1]))
    assert rel == "actor/optimizer.pt" and why == f"{size - 1} bytes, {size} when it was saved"
    flipped = damaged("flipped", lambda f: f.write_bytes(bytes([f.read_bytes()[0] ^ 1]) + f.read_bytes()[1:]))
    assert flipped == ("actor/optimizer.pt", "its checksum differs from the one written at save time")
    with pytest.raises(CheckpointError, match=r"global_step_1/actor/optimizer.pt: damaged \(missing\); choose another"):
        verified(tmp_path / "gone" / "global_step_1")  # resume_from_path: no fallback, the file named


def test_pruning_after_a_fallback_keeps_the_checkpoint_the_marker_names(tiny, tmp_path):
    parts = _parts(*tiny)
    for step in (2, 5):
        save_checkpoint(tmp_path, step, parts, {})
    (tmp_path / "global_step_5" / "actor" / "model.safetensors").write_bytes(b"")  # the newest is damaged
    pick = resumable_checkpoint(tmp_path)
    assert pick.path == tmp_path / "global_step_2" and "global_step_5 is damaged" in pick.notes[0]
    assert (tmp_path / MARKER).read_text().strip() == "2"  # the marker now names what the run continues from
    save_checkpoint(tmp_path, 3, parts, {})  # the resumed run saves its next step (save_freq changed, say)
    prune(tmp_path, {"actor": 1})
    # keep=1 counts committed checkpoints only: step 3 stays; the damaged step 5 above the marker is
    # not counted (it would otherwise have pushed out 3 and 2 both) and is left for the user.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["global_step_3", "global_step_5"]
    assert resumable_checkpoint(tmp_path).path == tmp_path / "global_step_3"


def test_a_marker_naming_a_missing_checkpoint_falls_back_or_refuses(tiny, tmp_path):
    save_checkpoint(tmp_path, 2, _parts(*tiny), {})
    (tmp_path / MARKER).write_text("4\n")
    pick = resumable_checkpoint(tmp_path)
    assert pick.path == tmp_path / "global_step_2" and "names global_step_4, which is missing" in pick.notes[0]
    shutil.rmtree(tmp_path / "global_step_2")
    with pytest.raises(CheckpointError, match="holds no complete checkpoint at or before it"):
        resumable_checkpoint(tmp_path)
