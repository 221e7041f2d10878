"""Tiny, randomly initialised Qwen2-VL vision-language models, built fully offline.

The vision counterpart of `posttrain.models.tiny`: the same character tokenizer with Qwen2-VL's
four vision tokens added (``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``,
``<|video_pad|>``), a two-layer text model and a one-block vision tower with 4-pixel patches, so a
16 x 16 image becomes 16 patches merged into 4 image tokens. The directory is an ordinary Hugging
Face Qwen2-VL directory (config.json, model.safetensors, tokenizer files, preprocessor_config.json
of the PIL image processor), loaded by `AutoModelForImageTextToText` / `AutoImageProcessor` as a
real checkpoint would be. Building is deterministic (same arguments, same weights).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken
from transformers import (
    GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLConfig, Qwen2VLForConditionalGeneration,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from posttrain.errors import ConfigError
from posttrain.models.quiet import quiet_transformers
from posttrain.models.tiny import _write_portable_tokenizer_config
from posttrain.models.tokenizer import IM_END, PAD_TOKEN, build_tiny_tokenizer

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
PATCH = 4  # pixels per patch side: small images stay a handful of tokens
MERGE = 2  # patches merged per side into one image token (Qwen2-VL's spatial_merge_size)
IMAGE_SIDE = 16  # the processor resizes to within [IMAGE_SIDE^2, 4 * IMAGE_SIDE^2] pixels by default

__all__ = ["VISION_TOKENS", "make_tiny_vl_model"]


def make_tiny_vl_model(
    out_dir: str | Path, *, layers: int = 2, hidden: int = 64, heads: int = 4, vision_depth: int = 1,
    vision_dim: int = 32, max_position: int = 512, seed: int = 0, family: str = "qwen2_vl",
) -> Path:
    """Write a random-init tiny Qwen2-VL model, its tokenizer and image processor to `out_dir`.

    The text model's rotary sections (`mrope_section`, temporal/height/width shares of the rotary
    pairs) split `hidden / heads / 2` pairs as evenly as they go. The global torch RNG is untouched.
    ``family: qwen2_5_vl`` writes a Qwen2.5-VL model instead (its windowed vision tower with one
    full-attention block, and a video time axis of 2 position steps per second)."""
    if family not in ("qwen2_vl", "qwen2_5_vl"):
        raise ConfigError(f"family must be qwen2_vl or qwen2_5_vl, got {family!r}")
    if hidden % heads or (hidden // heads) % 2:
        raise ConfigError(f"--hidden {hidden} must be a multiple of --heads {heads} with an even head size")
    if vision_dim % 2 or vision_dim < 4:
        raise ConfigError(f"--vision-dim must be even and >= 4, got {vision_dim}")
    tokenizer = build_tiny_tokenizer(model_max_length=max_position)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in VISION_TOKENS], special_tokens=True)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    pairs = hidden // heads // 2
    section = [pairs - 2 * (pairs // 3), pairs // 3, pairs // 3]  # temporal, height, width
    eos, pad = tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    text = dict(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_position,
        rope_scaling={"type": "mrope", "mrope_section": section}, bos_token_id=pad, eos_token_id=eos,
        pad_token_id=pad, tie_word_embeddings=False,
    )
    if family == "qwen2_vl":
        vision = dict(depth=vision_depth, embed_dim=vision_dim, hidden_size=hidden, num_heads=2, mlp_ratio=2, patch_size=PATCH,
                      spatial_merge_size=MERGE, temporal_patch_size=2, in_channels=3)
    else:
        vision = dict(depth=vision_depth, hidden_size=vision_dim, intermediate_size=2 * vision_dim, out_hidden_size=hidden,
                      num_heads=2, patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=2, in_channels=3,
                      window_size=2 * PATCH * MERGE, fullatt_block_indexes=[vision_depth - 1], tokens_per_second=2)
    config_cls, model_cls = ((Qwen2VLConfig, Qwen2VLForConditionalGeneration) if family == "qwen2_vl"
                             else (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration))
    config = config_cls(
        text_config=text, vision_config=vision,
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=pad, eos_token_id=eos, pad_token_id=pad, tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
    processor = Qwen2VLImageProcessorPil(
        patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2,
        min_pixels=IMAGE_SIDE * IMAGE_SIDE, max_pixels=4 * IMAGE_SIDE * IMAGE_SIDE,
    )
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        processor.save_pretrained(out)
    _write_portable_tokenizer_config(out)
    return out
