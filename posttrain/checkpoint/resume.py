"""Which checkpoint a stage resumes from, verified before it is trusted.

The marker names the newest committed checkpoint. Resume takes it if it verifies (see `manifest`);
else the newest older one that does, and the marker is rewritten to name that one, so pruning,
export and the next rerun agree on it. A checkpoint is never deleted here: a damaged one stays
where it is (the next save of its step replaces it; pruning ignores directories above the marker).

- Marker unreadable (garbled) or missing while checkpoints exist: the newest intact checkpoint, said.
- Nothing intact: `CheckpointError` naming the damaged file of the newest checkpoint, and how to go
  on. Never a silent start from step 0.
- No marker and no checkpoint: a fresh stage (None).

Every decision is a line in `Resume.notes` for the caller to print. With several processes, one
(the launcher, or rank 0) decides and the others are told: this may rewrite the marker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from posttrain.checkpoint.layout import MARKER, TRAINER_STATE, read_marker, step_dirs
from posttrain.checkpoint.load import CheckpointError
from posttrain.checkpoint.manifest import MANIFEST, verify_checkpoint
from posttrain.files import atomic_write_text


@dataclass
class Resume:
    """The checkpoint to continue from (None: start the stage fresh) and what to tell the user."""

    path: Path | None
    notes: list[str] = field(default_factory=list)


def _legacy_note(path: Path) -> str:
    return (f"{path} has no {MANIFEST} (written by an older posttrain): its files were checked for "
            "completeness only, not against checksums")


def verified(path: Path) -> Resume:
    """`path` itself (trainer.resume_from_path), if intact; else `CheckpointError` naming the file."""
    verdict = verify_checkpoint(path)
    if verdict.damage is not None:
        rel, why = verdict.damage
        raise CheckpointError(f"{path / rel}: damaged ({why}); choose another trainer.resume_from_path")
    return Resume(path, [] if verdict.has_manifest else [_legacy_note(path)])


def resumable_checkpoint(root: Path) -> Resume:
    """The newest intact checkpoint under `root` that the marker allows (see the module docstring)."""
    named, unreadable = read_marker(root)
    complete = [(s, p) for s, p in step_dirs(root) if (p / TRAINER_STATE).is_file()]
    notes: list[str] = []
    if named is None:
        if not complete:
            if unreadable != "missing":
                notes.append(f"{root / MARKER} is unreadable ({unreadable!r}) and no checkpoint exists; the stage starts over")
            return Resume(None, notes)
        notes.append(f"{root / MARKER} is {'missing' if unreadable == 'missing' else f'unreadable ({unreadable!r})'}; "
                     "looking for the newest intact checkpoint")
    candidates = [(s, p) for s, p in reversed(complete) if named is None or s <= named]  # newest first
    if named is not None and (not candidates or candidates[0][0] != named):
        notes.append(f"{root / MARKER} names global_step_{named}, which is missing or incomplete")
        if not candidates:
            raise CheckpointError(
                f"{root / MARKER} names global_step_{named}, but {root} holds no complete checkpoint at or before "
                f"it; restore the checkpoints, or delete {root} to start this stage over"
            )
    damaged: list[tuple[Path, tuple[str, str]]] = []
    for step, path in candidates:
        verdict = verify_checkpoint(path)
        if verdict.damage is not None:
            damaged.append((path, verdict.damage))
            continue
        if damaged:
            first, (rel, why) = damaged[0]
            notes.append(f"{first} is damaged ({rel}: {why}); resuming from the newest intact checkpoint, {path}")
        if not verdict.has_manifest:
            notes.append(_legacy_note(path))
        if step != named:
            atomic_write_text(root / MARKER, f"{step}\n")  # the marker names what the run continues from
        return Resume(path, notes)
    first, (rel, why) = damaged[0]
    older = f" (the {len(damaged) - 1} older ones are damaged too)" if len(damaged) > 1 else ""
    raise CheckpointError(
        f"{first / rel}: damaged ({why}); no intact checkpoint to fall back on in {root}{older}. Restore the "
        f"file, or move {root} away to start this stage over"
    )
