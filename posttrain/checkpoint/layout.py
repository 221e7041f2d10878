"""Where checkpoints live and which one is complete.

    <checkpoint root>/                      trainer.checkpoint_dir, or <stage run dir>/checkpoints
      global_step_N/
        actor/                              a Hugging Face directory (config, model.safetensors,
                                            tokenizer) + optimizer.pt + extra.pt (LR schedule, ...)
        critic/                             the same for the value model, when there is one
        trainer_state.json                  counters, sampler, KL controller, python/numpy RNG
        rng.safetensors                     torch RNG and component generators
        manifest.json                       size and SHA-256 of every other file (written last)
      latest_checkpointed_iteration.txt     N of the newest COMPLETE checkpoint (verl's marker name)

A checkpoint is written into `global_step_N.tmp/`, fsynced (every file and directory), renamed to
`global_step_N/` (the rename fsynced too), and only then named by the marker (itself replaced
atomically). So a kill at any moment leaves the marker naming the
previous complete checkpoint; a directory the marker does not name is never resumed from. Resume
verifies a checkpoint against its manifest before trusting it (`resume`).
"""

from __future__ import annotations

import re
from pathlib import Path

from posttrain.errors import UserError

MARKER = "latest_checkpointed_iteration.txt"
TRAINER_STATE = "trainer_state.json"
RNG_FILE = "rng.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
EXTRA_FILE = "extra.pt"
STAGE_COMPLETE = "stage_complete.json"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointError(UserError):
    """A checkpoint is missing, incomplete or does not fit the run resuming from it."""


def step_dir(root: Path, step: int) -> Path:
    return root / f"global_step_{step}"


def step_of(path: Path) -> int | None:
    """N of a `global_step_N` directory name, else None."""
    m = _STEP_DIR.match(path.name)
    return int(m.group(1)) if m else None


def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """Every `global_step_N` directory under root, oldest first (complete or not)."""
    if not root.is_dir():
        return []
    found = [(step_of(p), p) for p in root.iterdir() if p.is_dir()]
    return sorted((s, p) for s, p in found if s is not None)


def read_marker(root: Path) -> tuple[int | None, str | None]:
    """(step the marker names, None), or (None, why it names none): "missing", or its content."""
    marker = root / MARKER
    if not marker.is_file():
        return None, "missing"
    text = marker.read_bytes().decode("utf-8", errors="replace").strip()
    return (int(text), None) if text.isdigit() else (None, text[:40])


def latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint the marker names, if the marker and that directory exist."""
    marker = root / MARKER
    if not marker.is_file():
        return None
    text = marker.read_text(encoding="utf-8").strip()
    if not text.isdigit():
        return None
    path = step_dir(root, int(text))
    return path if (path / TRAINER_STATE).is_file() else None


def is_checkpoint(path: Path) -> bool:
    """A `global_step_N` directory holding a trainer state (what resume_from_path must name)."""
    return step_of(path) is not None and (path / TRAINER_STATE).is_file()
