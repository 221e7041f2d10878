"""Checkpoints: exact resume of every stage kind, keep-last-N, and export to a Hugging Face directory.

`layout` says where files go and which checkpoint is complete; `save`/`load` write and restore one
checkpoint without pickle; `manifest` lists every file of a checkpoint with its checksum and
verifies it; `resume` picks the newest intact checkpoint to continue from; `manager.Checkpointer` is the cadence a fit loop calls; `logs` trims a
stage's metric files back to the resumed step; `export` makes a standalone model directory.
"""

from posttrain.checkpoint.export import export_model, resolve_model_dir
from posttrain.checkpoint.layout import MARKER, STAGE_COMPLETE, latest_checkpoint
from posttrain.checkpoint.load import CheckpointError, load_checkpoint
from posttrain.checkpoint.manager import KILL_ENV, Checkpointer, checkpoint_root
from posttrain.checkpoint.save import Parts, Role, prune, save_checkpoint
from posttrain.checkpoint.state import Extra

__all__ = [
    "KILL_ENV",
    "MARKER",
    "STAGE_COMPLETE",
    "CheckpointError",
    "Checkpointer",
    "Extra",
    "Parts",
    "Role",
    "checkpoint_root",
    "export_model",
    "latest_checkpoint",
    "load_checkpoint",
    "prune",
    "resolve_model_dir",
    "save_checkpoint",
]
