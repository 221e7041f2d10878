"""A damaged checkpoint as a user meets it: the real CLI is killed mid-run, a file of its newest
checkpoint (or the marker) is damaged, and the same command is rerun. Resume verifies a checkpoint
against the manifest written at save time, falls back to the newest intact one and says so (the
continued run is then the uninterrupted one, step for step), or exits 2 with one line naming the
damaged file, leaving every file in place. Checkpoints without a manifest (written before it
existed) still resume, with one line saying they were checked for completeness only.

Only the killed run needs a process of its own (the test hook SIGKILLs it; it is forked from
posttrain's fork server, see test_resume_exact._train_killed); the uninterrupted run and the reruns
call the CLI in this process, with one torch thread as the killed run has, so the losses of every run
are computed in the same order and compare exactly."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from cli_run_helpers import posttrain
from test_resume_exact import _train_killed

from posttrain.checkpoint import MARKER
from posttrain.checkpoint.manifest import MANIFEST
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

SFT = """
model: {{path: {m}}}
algorithm: {{kind: sft}}
data: {{train_files: [{d}/sft_train.parquet], train_batch_size: 8, max_length: 64}}
actor: {{ppo_micro_batch_size_per_gpu: 8, optim: {{lr: 1e-3}}}}
trainer: {{total_training_steps: 4, save_freq: 1, max_actor_ckpt_to_keep: {keep}, logger: [jsonl], default_local_dir: {r}}}
"""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _cli(config: Path) -> subprocess.CompletedProcess:
    """`posttrain train CONFIG` run in this process."""
    return posttrain("train", str(config), cwd=config.parent)


def _config(root: Path, name: str, keep: int) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(SFT.format(m=root / "model", d=root / "data", r=root / name, keep=keep))
    return path


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["sft/loss"]) for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """An uninterrupted reference run, and a run killed after step 3 (checkpoints 2 and 3 kept)."""
    root = tmp_path_factory.mktemp("damaged")
    make_tiny_model(root / "model", layers=1, hidden=32, seed=0)
    write_task_data("sort", root / "data", train=8, test=0, sft=32, dpo=0, seed=0)
    ref = _cli(_config(root, "ref", keep=2))
    assert ref.returncode == 0, ref.stderr[-2000:]
    _train_killed(_config(root, "killed", keep=2), "main:3:after_step")
    return root


def _copy(root: Path, name: str, keep: int = 2) -> tuple[Path, Path]:
    """A copy of the killed run (its config pointing at the copy): (config, checkpoint root)."""
    shutil.copytree(root / "killed", root / name)
    return _config(root, name, keep), root / name / "checkpoints"


def _no_traceback(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout, out.stderr[-3000:]


def test_a_truncated_optimizer_file_falls_back_to_the_previous_checkpoint(killed):
    config, ckpts = _copy(killed, "truncated")
    optimizer = ckpts / "global_step_3" / "actor" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    out = _cli(config)
    _no_traceback(out)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"{ckpts / 'global_step_3'} is damaged (actor/optimizer.pt: 100 bytes" in out.stdout
    assert f"resuming from the newest intact checkpoint, {ckpts / 'global_step_2'}" in out.stdout
    assert f"resuming from {ckpts / 'global_step_2'} (after step 2)" in out.stdout
    # Continued from step 2, exactly: the same losses as the uninterrupted run, each step once; the
    # damaged checkpoint was rewritten by the next save and pruning kept the two newest.
    assert _losses(killed / "truncated") == _losses(killed / "ref")
    assert sorted(p.name for p in ckpts.iterdir() if p.is_dir()) == ["global_step_3", "global_step_4"]
    assert (ckpts / MARKER).read_text().strip() == "4"


def test_a_garbled_marker_resumes_from_the_newest_intact_checkpoint(killed):
    config, ckpts = _copy(killed, "garbled")
    (ckpts / MARKER).write_text("\x00\x00garbage")
    out = _cli(config)
    _no_traceback(out)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"{ckpts / MARKER} is unreadable" in out.stdout
    assert f"resuming from {ckpts / 'global_step_3'} (after step 3)" in out.stdout  # not from step 0
    assert _losses(killed / "garbled") == _losses(killed / "ref")


def test_the_only_checkpoint_damaged_exits_naming_the_file_and_keeps_everything(killed):
    config, ckpts = _copy(killed, "only", keep=1)
    shutil.rmtree(ckpts / "global_step_2")  # as keep=1 would have left it: one checkpoint
    weights = ckpts / "global_step_3" / "actor" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF  # same size, one byte flipped
    weights.write_bytes(bytes(data))
    before = sorted(str(p.relative_to(ckpts)) for p in ckpts.rglob("*"))
    out = _cli(config)
    _no_traceback(out)
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"posttrain: error: {weights}: damaged (its checksum differs from the one written at save time)")
    assert "no intact checkpoint to fall back on" in line
    assert sorted(str(p.relative_to(ckpts)) for p in ckpts.rglob("*")) == before  # nothing deleted
    assert weights.read_bytes() == bytes(data)


def test_a_checkpoint_without_a_manifest_still_resumes_and_says_so_once(killed):
    config, ckpts = _copy(killed, "legacy")
    for step in (2, 3):
        (ckpts / f"global_step_{step}" / MANIFEST).unlink()
    out = _cli(config)
    _no_traceback(out)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("has no manifest") == 1
    assert f"resuming from {ckpts / 'global_step_3'} (after step 3)" in out.stdout
    assert _losses(killed / "legacy") == _losses(killed / "ref")
    assert (ckpts / "global_step_4" / MANIFEST).is_file()  # new checkpoints get one


def test_a_truncated_checkpoint_without_a_manifest_is_caught_by_its_structure(killed):
    config, ckpts = _copy(killed, "legacy_truncated")
    for step in (2, 3):
        (ckpts / f"global_step_{step}" / MANIFEST).unlink()
    weights = ckpts / "global_step_3" / "actor" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-50])
    out = _cli(config)
    _no_traceback(out)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"{ckpts / 'global_step_3'} is damaged (actor/model.safetensors:" in out.stdout
    assert f"resuming from {ckpts / 'global_step_2'} (after step 2)" in out.stdout
    assert _losses(killed / "legacy_truncated") == _losses(killed / "ref")
