"""Writing one checkpoint, then deleting old ones (see `layout` for the files and the marker).

The order is what makes a kill harmless: everything goes into `global_step_N.tmp/`, every file and
directory of it is fsynced, the directory is renamed (and its parent fsynced, so the new name is on
the disk too), the marker is replaced (atomically, fsynced) to name it, and only after that are older checkpoints
pruned to `max_actor_ckpt_to_keep` / `max_critic_ckpt_to_keep` (verl's keys; verl also removes old
checkpoints only after the new save).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from posttrain.checkpoint.adapter import save_adapter_role, save_merged
from posttrain.checkpoint.layout import (
    EXTRA_FILE, MARKER, OPTIMIZER_FILE, RNG_FILE, TRAINER_STATE, read_marker, step_dir, step_dirs,
)
from posttrain.checkpoint.state import (
    Stateful, atomic_write_text, python_numpy_rng, save_generators, save_torch_state, write_json,
)
from posttrain.checkpoint.sharded import save_sharded_role
from posttrain.cluster.fsdp import full_state_dict, is_sharded
from posttrain.cluster.world import World
from posttrain.checkpoint.manifest import write_manifest
from posttrain.files import fsync_dir, fsync_tree
from posttrain.models.lora import is_lora
from posttrain.models.quiet import quiet_transformers
from posttrain.models.vision import copy_processor_files


@dataclass
class Role:
    """A trained model and what continues its training: the optimizer, and `extra` (LR schedule,
    shuffle generator, weights version: whatever `state_dict` the role's owner gives)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer | None = None
    extra: Stateful | None = None
    tokenizer: Any = None  # saved beside the weights so the directory is a standalone HF model


@dataclass
class Parts:
    """Everything a stage checkpoints: roles by name, JSON states (sampler, KL controller, running
    statistics), and generators (the rollout engine's sampling RNG)."""

    roles: dict[str, Role]
    states: dict[str, Stateful] = field(default_factory=dict)
    generators: dict[str, torch.Generator] = field(default_factory=dict)


def save_hf(model: nn.Module, out: Path, tokenizer: Any = None) -> None:
    """A Hugging Face directory: safetensors weights and config (and the tokenizer when given).

    A model sharded over worker processes is gathered whole first: a collective every rank calls;
    rank 0 writes the directory. A model with a LoRA adapter is written merged, with the adapter
    in `adapter/` (posttrain.checkpoint.adapter)."""
    if is_lora(model):
        save_merged(model, out, tokenizer)
        return
    state = None
    if is_sharded(model):
        state = full_state_dict(model, main_only=True)
        if torch.distributed.get_rank() != 0:
            return
    with quiet_transformers():
        model.save_pretrained(out, safe_serialization=True, state_dict=state)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
    copy_processor_files(model, out)  # a vision-language model's image processor


ALL_CONTENTS = ("model", "optimizer", "extra")
HF_SUBDIR = "huggingface"  # verl's name for a role's standalone Hugging Face copy (save_contents hf_model)


def _saved_view(role: Role, contents: set[str]) -> Role:
    """The role as far as `contents` saves it: the optimizer and the extra state only when listed."""
    return Role(role.model, role.optimizer if "optimizer" in contents else None,
                role.extra if "extra" in contents else None, role.tokenizer)


def save_checkpoint(root: Path, step: int, parts: Parts, trainer_state: dict[str, Any],
                    before_marker: Callable[[], None] | None = None, world: World = World(),
                    contents: dict[str, Any] | None = None) -> Path:
    """Write checkpoint `step` under `root` and name it in the marker; returns its directory.
    `before_marker` runs between the rename and the marker (the kill-during-save test hook).
    `contents[role]` (actor/critic.checkpoint.save_contents; default model, optimizer, extra) picks
    what each role writes: the weights always (model and hf_model both name them), optimizer.pt and
    extra.pt only when listed, and with hf_model a standalone Hugging Face copy in `<role>/huggingface/`
    where the role directory is not one already (a LoRA adapter, or a sharded model's DCP files).
    What was saved is recorded in trainer_state.json, so a resume knows what it cannot restore.

    With several worker processes every rank calls this: each writes its shards of the sharded
    roles (`posttrain.checkpoint.sharded`) into the same temporary directory, and rank 0 renames it
    and writes the marker only once every rank has finished writing."""
    final = step_dir(root, step)
    tmp = final.with_name(final.name + ".tmp")
    if world.is_main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    world.barrier()  # the directory exists before any rank writes into it
    saved = {name: sorted(set((contents or {}).get(name) or ALL_CONTENTS)) for name in parts.roles}
    for name, whole in parts.roles.items():
        out = tmp / name
        role = _saved_view(whole, set(saved[name]))
        standalone = not (is_lora(role.model) or is_sharded(role.model))
        if "hf_model" in saved[name] and not standalone:  # the role directory is no model by itself
            save_hf(role.model, out / HF_SUBDIR, role.tokenizer)
        if is_lora(role.model):  # the adapter and its optimizer state, whole, however the model is sharded
            save_adapter_role(role, out)
            continue
        if is_sharded(role.model):
            save_sharded_role(role, out, world.is_main)
            continue
        save_hf(role.model, out, role.tokenizer)
        if role.optimizer is not None:
            save_torch_state(out / OPTIMIZER_FILE, role.optimizer.state_dict())
        if role.extra is not None:
            save_torch_state(out / EXTRA_FILE, role.extra.state_dict())
    world.barrier()  # every rank's shards are written
    if world.is_main:
        _complete(root, final, tmp, step, parts, dict(trainer_state, contents=saved), before_marker)
    world.barrier()  # no rank runs ahead into a step while the marker may still name an older checkpoint
    return final


def _complete(root: Path, final: Path, tmp: Path, step: int, parts: Parts, trainer_state: dict[str, Any],
              before_marker: Callable[[], None] | None) -> None:
    """Rank 0's part of a save once every file of the roles is written: the trainer state, the
    rename, the marker."""
    save_generators(tmp / RNG_FILE, parts.generators)
    state = dict(trainer_state, step=step, rng=python_numpy_rng(),
                 states={k: v.state_dict() for k, v in parts.states.items()})
    write_json(tmp / TRAINER_STATE, state)
    fsync_tree(tmp)  # every byte on the disk before any name points at it
    write_manifest(tmp)  # last file of the checkpoint: sizes and checksums of all the others
    if final.exists():  # an incomplete directory of an earlier, killed attempt at this step
        shutil.rmtree(final)
    tmp.rename(final)
    fsync_dir(root)  # the rename itself: global_step_N exists on the disk before the marker names it
    if before_marker is not None:
        before_marker()
    atomic_write_text(root / MARKER, f"{step}\n")


def prune(root: Path, keep: dict[str, int | None]) -> list[Path]:
    """After a complete save: delete role directories beyond the newest `keep[role]` checkpoints,
    a checkpoint directory once no role is left in it, and leftovers of killed saves. Returns
    what was deleted.

    Only checkpoints at or before the one the marker names count: a directory above it was never
    committed (a save killed before its marker, or a damaged checkpoint a resume fell back from),
    so it must not push an intact older one out. With no readable marker nothing is pruned."""
    deleted: list[Path] = []
    for leftover in root.glob("global_step_*.tmp"):
        shutil.rmtree(leftover, ignore_errors=True)
        deleted.append(leftover)
    named, _ = read_marker(root)
    if named is None:
        return deleted
    dirs = [p for s, p in step_dirs(root) if s <= named]
    for role, n in keep.items():
        if n is None:
            continue
        with_role = [p for p in dirs if (p / role).is_dir()]
        for old in with_role[: max(len(with_role) - n, 0)]:
            shutil.rmtree(old / role)
            deleted.append(old / role)
    for path in dirs:
        if not any(child.is_dir() for child in path.iterdir()):
            shutil.rmtree(path)
            deleted.append(path)
    return deleted
