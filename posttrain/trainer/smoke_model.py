"""The smoke run's model: a tiny random model of the user's architecture family (posttrain.trainer.smoke).

When the config's model path is a directory here, or a hub name the local Hugging Face cache holds,
its config.json is kept with the sizes shrunk (2 layers, hidden 64, at most 4 experts, ...) and its
tokenizer is reused, so the chat template and the special tokens are the user's. Otherwise, or
when transformers cannot build that family small, posttrain's default tiny Qwen2 model is built, or
its tiny Qwen2-VL / Qwen2.5-VL model when the name is one of those vision-language families (so
image rows and image observations have a vision tower to reach).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# config.json fields shrunk where the family has them; head_dim 16 keeps rotary pairs even
_SHRINK = {
    "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "num_experts": 4, "n_routed_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
    "max_window_layers": 2, "max_position_embeddings": 1024,
}


def tiny_like(source: str, out: Path) -> tuple[Path, str]:
    """``(model directory, what it is)`` for the model path ``source`` (module docstring)."""
    from posttrain.models.loading import cached_snapshot

    local = Path(source).expanduser() if source else None
    if local is not None and not local.is_dir():
        local = cached_snapshot(source)
    if local is not None and (local / "config.json").is_file():
        try:
            return _shrunk(local, out)
        except Exception as err:  # noqa: BLE001 - any family transformers cannot build small: the default
            why = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}" if str(err) else type(err).__name__
            return _default(out, f"its family could not be built small ({why})")
    return _default(out, "no config.json of it on this machine" if source else "no model path given", source or "")


# hub names of the vision-language families posttrain builds tiny (posttrain.models.tiny_vl), e.g. Qwen/Qwen2.5-VL-3B-Instruct
_VL_NAME = re.compile(r"qwen2(\.5)?-vl", re.IGNORECASE)


def _default(out: Path, why: str, source: str = "") -> tuple[Path, str]:
    from posttrain.models.tiny import make_tiny_model

    vl = _VL_NAME.search(Path(source).name)
    if vl:
        from posttrain.models.tiny_vl import make_tiny_vl_model

        family = "qwen2_5_vl" if vl.group(1) else "qwen2_vl"
        return make_tiny_vl_model(out, family=family, max_position=1024), f"posttrain's tiny {family} model ({why})"
    path = make_tiny_model(out, layers=2, hidden=64, heads=4, max_position=1024)
    return path, f"posttrain's default tiny model ({why})"


def _shrunk(local: Path, out: Path) -> tuple[Path, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from posttrain.models.quiet import quiet_transformers

    with quiet_transformers():
        config = AutoConfig.from_pretrained(local)
        tokenizer = AutoTokenizer.from_pretrained(local)
    _shrink(config)
    config.vocab_size = max(len(tokenizer), getattr(config, "vocab_size", 0) or 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    size = sum(p.numel() for p in model.parameters())
    return out, f"a tiny random {config.model_type} model ({size / 1e6:.1f}M parameters, {local.name}'s tokenizer)"


def _shrink(config: Any) -> None:
    """Shrink the sizes ``config`` has (and its text sub-config, for multimodal families)."""
    for name, value in _SHRINK.items():
        if getattr(config, name, None) is not None:
            setattr(config, name, value)
    layers = getattr(config, "layer_types", None)
    if isinstance(layers, list):
        config.layer_types = layers[: _SHRINK["num_hidden_layers"]]
    text = getattr(config, "text_config", None)
    if text is not None and text is not config:
        _shrink(text)
