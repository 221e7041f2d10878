"""The checkpoint of a role that trains a LoRA adapter (posttrain.models.lora): the adapter, not the model.

    <role>/                         e.g. global_step_N/actor/
      adapter_config.json           peft's format; base_model_name_or_path names the base model directory
      adapter_model.safetensors     the adapter's tensors, whole
      tokenizer files, optimizer.pt (the adapter's AdamW state), extra.pt   as for a whole model

The base weights never change, so the directory they were loaded from already holds them: a
checkpoint holds only what training changed (megabytes instead of the model). The adapter and its
optimizer state are written whole by rank 0 even when the model is sharded (they are small), so a
checkpoint loads on any number of worker processes the same way.

A LoRA stage's final model (`save_merged`) is the merged policy as a plain Hugging Face directory,
which the next stage and `from_pretrained` load like any model, with its adapter in `adapter/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from posttrain.checkpoint.layout import EXTRA_FILE, OPTIMIZER_FILE, CheckpointError
from posttrain.checkpoint.state import load_torch_state, save_torch_state
from posttrain.cluster.fsdp import full_optimizer_state, is_sharded, load_full_optimizer_state
from posttrain.errors import ModelError
from posttrain.models.lora import adapter_state, is_adapter_dir, is_lora, load_adapter_state, merged_tensors, read_adapter, write_adapter
from posttrain.models.quiet import quiet_transformers

ADAPTER_SUBDIR = "adapter"  # where a final model keeps the adapter it was merged from


def _is_main(model: nn.Module) -> bool:
    return not is_sharded(model) or torch.distributed.get_rank() == 0


def save_adapter_role(role: Any, out: Path) -> None:
    """Write a LoRA role (a `posttrain.checkpoint.save.Role`) into `out`. A collective when the model
    is sharded: every rank calls it, rank 0 writes."""
    state = adapter_state(role.model)
    optimizer = full_optimizer_state(role.model, role.optimizer) if role.optimizer is not None else None
    if not _is_main(role.model):
        return
    write_adapter(role.model, out, state, role.tokenizer)
    if optimizer is not None:
        save_torch_state(out / OPTIMIZER_FILE, optimizer)
    if role.extra is not None:
        save_torch_state(out / EXTRA_FILE, role.extra.state_dict())


def check_role_kind(model: nn.Module, role_dir: Path) -> None:
    """A LoRA run resumes from an adapter checkpoint and a full run from a whole model, never across."""
    saved, training = is_adapter_dir(role_dir), is_lora(model)
    if saved and not training:
        raise CheckpointError(
            f"{role_dir}: holds a LoRA adapter, but this run trains all weights; resume it with the LoRA settings "
            "that wrote it (model.lora_rank > 0), or export it merged (`posttrain export --merge`) and start from that"
        )
    if training and not saved:
        raise CheckpointError(
            f"{role_dir}: holds whole weights, but this run trains a LoRA adapter; resume it with model.lora_rank 0, "
            "or start a LoRA run from the exported model (model.path)"
        )


def load_adapter_role(model: nn.Module, optimizer: torch.optim.Optimizer | None, role_dir: Path,
                      *, weights: bool, optimizer_state: bool) -> None:
    """Restore the adapter and/or its optimizer state from `role_dir` (any number of workers)."""
    if weights:
        try:
            load_adapter_state(model, read_adapter(role_dir), str(role_dir))
        except ModelError as err:
            raise CheckpointError(str(err)) from None
    if optimizer_state and optimizer is not None:
        whole = load_torch_state(role_dir / OPTIMIZER_FILE)
        if is_sharded(model):
            load_full_optimizer_state(model, optimizer, whole)
        else:
            optimizer.load_state_dict(whole)


def save_merged(model: nn.Module, out: Path, tokenizer: Any = None) -> None:
    """The policy with its adapter merged, as a plain Hugging Face directory, and the adapter in
    `out/adapter/`. A collective when the model is sharded (tensors are gathered one at a time);
    rank 0 keeps them on the CPU and writes."""
    main = _is_main(model)
    merged = {}
    for name, tensor in merged_tensors(model):
        if main:
            merged[name] = tensor.detach().cpu()
    state = adapter_state(model)
    if not main:
        return
    with quiet_transformers():
        model.save_pretrained(out, safe_serialization=True, state_dict=merged)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
    write_adapter(model, out / ADAPTER_SUBDIR, state, tokenizer)
