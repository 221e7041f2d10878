"""What reaches the disk before the marker names a checkpoint: every file and directory entry of it
is fsynced first, so a power loss after the marker cannot leave it naming empty or missing files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.checkpoint import MARKER, Parts, Role, save_checkpoint
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
    synced_before_rename = {Path(p) for kind, p in events[:renamed_at] if kind == "fsync"}
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
