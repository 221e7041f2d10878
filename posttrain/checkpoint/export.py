"""From a checkpoint (or a run directory) to a standalone Hugging Face model directory.

A single-process checkpoint's `actor/` is already loadable by `from_pretrained`; exporting copies
only the files a model user needs (config, safetensors weights, generation config, tokenizer, chat
template) and leaves the training state (optimizer.pt, extra.pt) behind. A checkpoint written by
several worker processes holds its weights in shards (`posttrain.checkpoint.sharded`): exporting
assembles them in this one process and writes them as safetensors beside the same small files.

A LoRA run's checkpoint holds an adapter (posttrain.checkpoint.adapter) and its final model is the
merged policy with the adapter in `adapter/`. Exporting writes the adapter by default (peft's
format, for `PeftModel.from_pretrained` over the base model), or with `merge` the merged model: the
final model's own files, or, from a checkpoint, the base model named in adapter_config.json with the
adapter merged in by peft (`merge_and_unload`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from posttrain.checkpoint.layout import MARKER, latest_checkpoint, step_of
from posttrain.checkpoint.load import CheckpointError
from posttrain.checkpoint.adapter import ADAPTER_SUBDIR
from posttrain.checkpoint.sharded import is_dcp_role, load_dcp_role
from posttrain.models.lora import CONFIG_FILE, is_adapter_dir

_TRAINING_FILES = {"optimizer.pt", "extra.pt"}


def _is_hf_dir(path: Path) -> bool:
    """A model directory: config and safetensors weights, config and sharded (DCP) weights, or a LoRA adapter."""
    return (path / "config.json").is_file() and (any(path.glob("*.safetensors")) or is_dcp_role(path)) or is_adapter_dir(path)


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


def export_model(source: Path, out: Path, *, overwrite: bool = False, merge: bool = False) -> Path:
    """Copy the model files of `source` (resolved by `resolve_model_dir`) into `out`; returns `out`.
    A LoRA source gives its adapter, or with `merge` the merged model (see the module docstring);
    `merge` on a whole model exports it as it is."""
    model_dir = resolve_model_dir(source)
    adapter = model_dir if is_adapter_dir(model_dir) else model_dir / ADAPTER_SUBDIR
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise CheckpointError(f"{out}: already exists and is not empty; choose a new output directory")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    if is_adapter_dir(adapter) and (not merge or adapter == model_dir):
        _copy_files(adapter, out)
        if merge:
            _merge(adapter, out)
        return out
    _copy_files(model_dir, out)
    if is_dcp_role(model_dir):
        _assemble(model_dir, out)
    return out


def _copy_files(directory: Path, out: Path) -> None:
    """The files of `directory` a model user needs (not its subdirectories, not the training state)."""
    for f in directory.iterdir():
        if f.is_file() and f.name not in _TRAINING_FILES:
            shutil.copy2(f, out / f.name)


def _merge(adapter: Path, out: Path) -> None:
    """`out` (holding a copy of the adapter's files) becomes the base model with the adapter merged."""
    import json

    from posttrain.models.loading import load_causal_lm
    from posttrain.models.lora import WEIGHTS_FILE, quiet_peft, require_peft
    from posttrain.models.quiet import quiet_transformers

    base = json.loads((adapter / CONFIG_FILE).read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base or not Path(base).is_dir():
        raise CheckpointError(
            f"{adapter / CONFIG_FILE}: its base model {base!r} (base_model_name_or_path) is not a local directory; "
            "set it to the model the adapter was trained on, or export without --merge"
        )
    peft = require_peft()
    with quiet_peft():
        model = peft.PeftModel.from_pretrained(load_causal_lm(base, dtype="auto"), adapter).merge_and_unload()
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        (out / name).unlink()
    with quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)


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
