"""Restoring a checkpoint written by `posttrain.checkpoint.save` into freshly built components.

Weights are copied into the stage's already-built modules (`load_state_dict` from the safetensors
file), not reloaded with `from_pretrained`, so every reference the trainer holds (optimizer
parameter groups, the rollout engine sharing the actor's module) stays valid and the values are
bit-for-bit those saved. Nothing is unpickled: see `posttrain.checkpoint.state`.
"""

from __future__ import annotations

import pickle
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from posttrain.checkpoint.adapter import check_role_kind, load_adapter_role
from posttrain.checkpoint.layout import EXTRA_FILE, OPTIMIZER_FILE, RNG_FILE, TRAINER_STATE, CheckpointError
from posttrain.checkpoint.save import Parts
from posttrain.checkpoint.sharded import is_dcp_role, load_dcp_role, load_into_sharded
from posttrain.cluster.fsdp import is_sharded, load_full_optimizer_state
from posttrain.models.lora import is_adapter_dir
from posttrain.checkpoint.state import load_generators, load_torch_state, read_json, restore_python_numpy_rng

__all__ = ["CheckpointError", "load_checkpoint", "load_weights"]


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """A file that cannot be read (truncated zip archive, bad safetensors header, garbled JSON)
    becomes one line naming it. Resume verifies a checkpoint first; this covers what changes after
    that, and checkpoints loaded without a resume (resume_from_path is verified too)."""
    try:
        yield
    except (RuntimeError, OSError, ValueError, EOFError, SafetensorError, pickle.UnpicklingError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: cannot be read, the file is damaged ({first})") from None


def load_weights(model: nn.Module, hf_dir: Path) -> None:
    """Copy the weights of `hf_dir` (one or more safetensors files) into `model`. A key the file
    lacks is accepted only for a tied parameter (saved once by `save_pretrained`)."""
    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{hf_dir}: no *.safetensors weights; the checkpoint is incomplete")
    state: dict[str, Any] = {}
    for f in files:
        with _reading(f):
            state.update(load_file(str(f)))
    if is_sharded(model):  # a single-process checkpoint resumed by several workers: each keeps its shard
        untied = [k for k in load_into_sharded(model, state) if not _tied(model, k, state)]
        if untied:
            raise CheckpointError(f"{hf_dir}: weights do not match the model (missing {untied[:3]}); resume with the model the checkpoint was trained from")
        return
    result = model.load_state_dict(state, strict=False)
    loaded = {t.data_ptr() for name, t in model.state_dict().items() if name in state}
    params = model.state_dict()
    untied = [k for k in result.missing_keys if params[k].data_ptr() not in loaded]
    if untied or result.unexpected_keys:
        raise CheckpointError(
            f"{hf_dir}: weights do not match the model (missing {untied[:3]}, unexpected "
            f"{result.unexpected_keys[:3]}); resume with the model the checkpoint was trained from"
        )


def _tied(model: nn.Module, name: str, saved: dict[str, Any]) -> bool:
    """Whether parameter `name` is the same tensor as one the file has (tied weights are saved once)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    if name not in params:
        return False
    return any(other in saved and params[other] is params[name] for other in params if other != name)


def _not_saved(path: Path, role: str, wanted: set[str], saved: Iterable[str] | None) -> set[str]:
    """The parts `wanted` that the checkpoint's role left out (its save_contents; None: everything
    was saved), each named once on stderr: the run continues without them, not exactly."""
    if saved is None:
        return set()
    missing = {part for part in wanted & {"optimizer", "extra"} if part not in saved}
    for part in sorted(missing):
        what = "the optimizer restarts with empty moments" if part == "optimizer" else "the LR schedule, generators and sampler restart"
        print(f"posttrain: warning: {path}/{role} was saved without its {part} (checkpoint.save_contents); "
              f"resuming continues without it, not exactly: {what}", file=sys.stderr)
    return missing


def load_checkpoint(path: Path, parts: Parts, load_contents: dict[str, Iterable[str]]) -> dict[str, Any]:
    """Restore `parts` from checkpoint directory `path`; returns its trainer state (step, ...).

    `load_contents[role]` picks what each role restores (actor/critic.checkpoint.load_contents):
    model (and its synonym hf_model: the weights), optimizer, extra (LR schedule, generators,
    version). Trainer-level state (sampler, KL controller, RNG) is restored with extra."""
    if not (path / TRAINER_STATE).is_file():
        raise CheckpointError(f"{path}: not a complete checkpoint (no {TRAINER_STATE})")
    with _reading(path / TRAINER_STATE):
        state = read_json(path / TRAINER_STATE)
    for name, role in parts.roles.items():
        role_dir = path / name
        if not role_dir.is_dir():
            raise CheckpointError(f"{path}: no {name}/ directory; this checkpoint was written by a run without a {name}")
        contents = set(load_contents.get(name, ("model", "optimizer", "extra")))
        contents -= _not_saved(path, name, contents, state.get("contents", {}).get(name))
        weights, optimizer = bool(contents & {"model", "hf_model"}), "optimizer" in contents and role.optimizer is not None
        check_role_kind(role.model, role_dir)
        if is_adapter_dir(role_dir):  # a LoRA role: its adapter and the adapter's optimizer state
            with _reading(role_dir):
                load_adapter_role(role.model, role.optimizer, role_dir, weights=weights, optimizer_state=optimizer)
        elif is_dcp_role(role_dir):  # written by several workers: loads on any number of them, or one
            load_dcp_role(role.model, role.optimizer, role_dir, weights=weights, optimizer_state=optimizer)
        else:
            if weights:
                load_weights(role.model, role_dir)
            if optimizer:
                with _reading(role_dir / OPTIMIZER_FILE):
                    whole = load_torch_state(role_dir / OPTIMIZER_FILE)
                if is_sharded(role.model):
                    load_full_optimizer_state(role.model, role.optimizer, whole)
                else:
                    role.optimizer.load_state_dict(whole)
        if "extra" in contents and role.extra is not None:
            with _reading(role_dir / EXTRA_FILE):
                extra_state = load_torch_state(role_dir / EXTRA_FILE)
            role.extra.load_state_dict(extra_state)
    if all("extra" in set(load_contents.get(n, ("extra",))) and "extra" in state.get("contents", {}).get(n, ("extra",))
           for n in parts.roles):
        saved = state.get("states", {})
        for name, obj in parts.states.items():
            if name not in saved:
                raise CheckpointError(f"{path}: the checkpoint has no {name!r} state; it was written by a different kind of stage")
            obj.load_state_dict(saved[name])
        with _reading(path / RNG_FILE):
            load_generators(path / RNG_FILE, parts.generators)
        restore_python_numpy_rng(state["rng"])
    return state
