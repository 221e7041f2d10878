"""Shared fixtures for the vision-language tests: one tiny Qwen2-VL directory per session (read-only)
and a helper that turns solid-colour images into a prompt batch."""

from pathlib import Path

import pytest
import torch
from PIL import Image

from posttrain.models.tiny_vl import make_tiny_vl_model
from posttrain.records import PromptBatch, VisionInputs


@pytest.fixture(scope="session")
def tiny_vl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A default tiny Qwen2-VL model, tokenizer and image processor (seed 0). Do not write into it."""
    return make_tiny_vl_model(tmp_path_factory.mktemp("tiny_vl"), seed=0)


def colour_image(rgb: tuple[int, int, int], size: tuple[int, int] = (16, 16)) -> Image.Image:
    return Image.new("RGB", size, rgb)


def vision_inputs(processor, image: Image.Image) -> VisionInputs:
    out = processor(images=[image], return_tensors="pt")
    return VisionInputs(out["pixel_values"], out["image_grid_thw"])


def prompt_batch(tokenizer, processor, images: list[Image.Image | None], question: str = "colour?") -> PromptBatch:
    """Left-padded ChatML prompts, one per entry of `images` (None: a text row without an image)."""
    vision = [None if im is None else vision_inputs(processor, im) for im in images]
    ids = []
    for v in vision:
        pads = "" if v is None else "<|vision_start|>" + "<|image_pad|>" * (int(v.image_grid_thw.prod()) // 4) + "<|vision_end|>"
        ids.append(tokenizer(f"<|im_start|>user\n{pads}{question}<|im_end|>\n<|im_start|>assistant\n").input_ids)
    width = max(map(len, ids))
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(i)) + i for i in ids])  # (B, P)
    mask = torch.tensor([[0.0] * (width - len(i)) + [1.0] * len(i) for i in ids])  # (B, P)
    return PromptBatch(input_ids=input_ids, attention_mask=mask, vision=vision)
