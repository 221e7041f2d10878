"""Trainer -> explorer weights of a decoupled run, through a directory both processes see.

After step k (every `synchronizer.sync_interval` steps, and the last) the trainer writes the policy's
whole weights as `step_<k>.safetensors` (into a temporary name, renamed when complete) and then
`latest.txt` (atomically) naming k. The explorer loads the newest step it is allowed to use before
each batch, and waits when the newest is too old (`posttrain.trainer.decoupled`). Older files are
removed once two newer ones exist, so a reader never has its file deleted mid-read.

The files are the synchronizer's `checkpoint` method; `nccl` and `memory` move the tensors over a
process group instead (`posttrain.buffer.weight_channel`) and keep only `latest.txt` here.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from posttrain.files import atomic_write_text, fsync_dir

LATEST = "latest.txt"


class WeightFiles:
    """The published weights in `directory`."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)

    def publish(self, state: dict[str, torch.Tensor], step: int) -> None:
        """Make the weights after trainer step `step` the newest (whole tensors; rank 0 calls it)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / f"step_{step}.safetensors"
        tmp = final.with_name(final.name + ".tmp")
        # safetensors refuses tensors that share memory (tied embeddings): store each once, by value
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in state.items()}, str(tmp))
        tmp.rename(final)
        fsync_dir(self.dir)
        self.announce(step)
        for old in self.steps()[:-3]:  # the newest and the two before it stay
            (self.dir / f"step_{old}.safetensors").unlink(missing_ok=True)

    def announce(self, step: int) -> None:
        """Name `step` in `latest.txt` (atomically): its weights are ready to be taken."""
        atomic_write_text(self.dir / LATEST, f"{step}\n")

    def steps(self) -> list[int]:
        """Published steps still on disk, oldest first."""
        return sorted(int(p.stem.removeprefix("step_")) for p in self.dir.glob("step_*.safetensors"))

    def latest(self) -> int | None:
        try:
            text = (self.dir / LATEST).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def load(self, step: int) -> dict[str, torch.Tensor]:
        return load_file(str(self.dir / f"step_{step}.safetensors"))
