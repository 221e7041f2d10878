"""From a checkpoint (or a run directory) to a standalone Hugging Face model directory.

A single-process checkpoint's `actor/` is already loadable by `from_pretrained`; exporting copies
only the files a model user needs (config, safetensors weights, generation config, tokenizer, chat
template) and leaves the training state (optimizer.pt, extra.pt) behind. A checkpoint written by
several worker processes holds its weights in shards (`posttrain.checkpoint.sharded`): exporting
assembles them in this one process and writes them as safetensors beside the same small files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from posttrain.checkpoint.layout import MARKER, latest_checkpoint, step_of
from posttrain.checkpoint.load import CheckpointError
from posttrain.checkpoint.sharded import is_dcp_role, load_dcp_role

_TRAINING_FILES = {"optimizer.pt", "extra.pt"}


def _is_hf_dir(path: Path) -> bool:
    """A model directory: config and safetensors weights, or config and sharded (DCP) weights."""
    return (path / "config.json").is_file() and (any(path.glob("*.safetensors")) or is_dcp_role(path))


def resolve_model_dir(source: Path) -> Path:
    """The actor HF directory `source` stands for: an actor directory itself, a `global_step_N`
    checkpoint, a checkpoint root (its latest complete checkpoint), or a stage run directory
    (`checkpoints/` in it, else its `final_model/`)."""
    source = Path(source).expanduser()
    if not source.exists():
        raise CheckpointError(f"{source}: no such checkpoint or run directory")
    if _is_hf_dir(source):
        return source
    if step_of(source) is not None:
        if _is_hf_dir(source / "actor"):
            return source / "actor"
        raise CheckpointError(f"{source}: checkpoint without a complete actor/ model directory")
    for root in (source, source / "checkpoints"):
        if (root / MARKER).is_file():
            latest = latest_checkpoint(root)
            if latest is None or not _is_hf_dir(latest / "actor"):
                raise CheckpointError(f"{root}/{MARKER} names no complete checkpoint; pass a global_step_N directory instead")
            return latest / "actor"
    if _is_hf_dir(source / "final_model"):
        return source / "final_model"
    stages = sorted(p.name for p in source.iterdir() if p.is_dir() and ((p / "checkpoints").is_dir() or (p / "final_model").is_dir()))
    hint = f" (a multi-stage run: pass one stage's directory, e.g. {source / stages[-1]})" if stages else ""
    raise CheckpointError(
        f"{source}: not a checkpoint (global_step_N or its actor/), a checkpoint directory with {MARKER}, "
        f"or a run directory with checkpoints/ or final_model/{hint}"
    )


def export_model(source: Path, out: Path, *, overwrite: bool = False) -> Path:
    """Copy the model files of `source` (resolved by `resolve_model_dir`) into `out`; returns `out`."""
    model_dir = resolve_model_dir(source)
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise CheckpointError(f"{out}: already exists and is not empty; choose a new output directory")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    for f in model_dir.iterdir():
        if f.is_file() and f.name not in _TRAINING_FILES:
            shutil.copy2(f, out / f.name)
    if is_dcp_role(model_dir):
        _assemble(model_dir, out)
    return out


def _assemble(model_dir: Path, out: Path) -> None:
    """The whole weights of a sharded checkpoint as safetensors in `out` (config already copied)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from posttrain.models.quiet import quiet_transformers

    with quiet_transformers():
        config = AutoConfig.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(config, "torch_dtype", None) or torch.float32)
    load_dcp_role(model, None, model_dir, weights=True, optimizer_state=False)
    with quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)
