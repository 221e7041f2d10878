"""A role's checkpoint when its model is sharded over worker processes: torch.distributed.checkpoint.

    <role>/                     e.g. global_step_N/actor/
      config.json, generation_config.json, tokenizer files     (rank 0: what a model directory needs)
      dcp/                      weights and optimizer state, one file per rank written in parallel
        .metadata, __0_0.distcp, __1_0.distcp, ...
      extra.pt                  (rank 0) LR schedule, shuffle generator, weights version

DCP stores every tensor with its global shape and each rank's piece, so a checkpoint written by N
workers loads on M workers, or in one process without torch.distributed (its reads are planned from
the metadata, not from the writer's layout). The state is taken through
`torch.distributed.checkpoint.state_dict` (`get_model_state_dict` / `get_optimizer_state_dict`):
parameter names, not positions, key the optimizer state, so it loads into a model sharded another way.

A single-process checkpoint (a Hugging Face directory + optimizer.pt) loads into a sharded role too:
every rank reads the whole tensors and keeps its shard (`load_into_sharded`). So resuming works in
both directions: N -> 1 through DCP, 1 -> N through the whole tensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict,
)

from posttrain.checkpoint.layout import EXTRA_FILE
from posttrain.checkpoint.state import save_torch_state
from posttrain.models.quiet import quiet_transformers

DCP_DIR = "dcp"


def is_dcp_role(role_dir: Path) -> bool:
    """Whether a role directory holds a distributed (DCP) checkpoint."""
    return (role_dir / DCP_DIR / ".metadata").is_file()


def save_sharded_role(role: Any, out: Path, is_main: bool) -> None:
    """Write `role` (a `posttrain.checkpoint.save.Role` whose model is sharded) into `out`. A
    collective: every rank calls it; each writes its own shard file, rank 0 the small files."""
    state = {"model": get_model_state_dict(role.model)}
    if role.optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(role.model, role.optimizer)
    dcp.save(state, checkpoint_id=str(out / DCP_DIR))
    if is_main:
        with quiet_transformers():
            role.model.config.save_pretrained(out)
            if getattr(role.model, "generation_config", None) is not None:
                role.model.generation_config.save_pretrained(out)
            if role.tokenizer is not None:
                role.tokenizer.save_pretrained(out)
        if role.extra is not None:
            save_torch_state(out / EXTRA_FILE, role.extra.state_dict())


def load_dcp_role(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, role_dir: Path,
                  *, weights: bool, optimizer_state: bool) -> None:
    """Restore weights and/or optimizer state of a DCP role directory into `model` (sharded any way,
    or not at all) and its optimizer. Every rank calls it."""
    state: dict[str, Any] = {}
    if weights:
        state["model"] = get_model_state_dict(model)
    if optimizer_state and optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer)  # initialises empty AdamW state to fill
    if not state:
        return
    dcp.load(state, checkpoint_id=str(role_dir / DCP_DIR))
    if "model" in state:
        set_model_state_dict(model, state["model"])
    if "optimizer" in state:
        set_optimizer_state_dict(model, optimizer, state["optimizer"])


def load_into_sharded(model: torch.nn.Module, whole: dict[str, torch.Tensor]) -> list[str]:
    """Copy whole tensors (a single-process checkpoint's weights) into a sharded model; returns the
    names the model has that `whole` lacks (tied weights are saved once)."""
    expected = set(get_model_state_dict(model))
    set_model_state_dict(model, whole, options=StateDictOptions(full_state_dict=True, strict=False))
    return sorted(expected - set(whole))
