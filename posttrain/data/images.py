"""Images in RL prompt rows, for a vision-language policy (posttrain.models.vision).

A row's `data.image_key` column (verl's ``images``) holds a list of images: Hugging Face image
structs ``{"bytes": ..., "path": ...}`` as parquet stores them, file paths, raw bytes or PIL images.
The prompt marks where each goes with ``<image>`` (verl's geo3k rows: ``"<image>Find x."``), one per
image, in order; images without a marker go before the first user message's text. Each marker becomes the model family's vision span (``<|vision_start|>
<|image_pad|><|vision_end|>``) before the chat template renders the prompt, and after tokenisation
the single ``<|image_pad|>`` is repeated once per merged patch of its image, as the family's
processor does. The patches themselves (`VisionInputs`) come from the model directory's image
processor, so the prompt ids and the vision tower's input always agree.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from posttrain.errors import DataError, ModelError
from posttrain.records import VisionInputs

PLACEHOLDER = "<image>"  # where a row's prompt puts each of its images (verl's convention)
VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"


def load_image(value: Any, what: str, base_dir: Path | None = None):
    """One image cell as an RGB PIL image: a PIL image, a ``{"bytes"|"path"}`` struct, bytes, or a path
    (relative to `base_dir`, the data file's folder)."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, dict):
        value = value.get("bytes") or value.get("path") or value.get("image")
        if value is None:
            raise DataError(f"{what}: an image struct needs 'bytes' or 'path'")
        return load_image(value, what, base_dir)
    try:
        if isinstance(value, (bytes, bytearray)):
            return Image.open(io.BytesIO(value)).convert("RGB")
        if isinstance(value, str):
            path = Path(value).expanduser()
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            return Image.open(path).convert("RGB")
    except (OSError, UnidentifiedImageError) as err:
        raise DataError(f"{what}: cannot read the image: {err}") from err
    raise DataError(f"{what}: expected an image (bytes/path struct, path, bytes or PIL image), got {type(value).__name__}")


@dataclass
class ImageInputs:
    """The image side of a vision-language policy's prompts: its image processor, the pixel bounds
    (data.image_min_pixels / image_max_pixels, None: the processor's own) and its tokenizer."""

    processor: Any  # the model directory's image processor (AutoImageProcessor)
    tokenizer: Any
    min_pixels: int | None = None
    max_pixels: int | None = None

    @classmethod
    def from_model_dir(cls, path: str | Path, tokenizer: Any, *, min_pixels: int | None = None,
                       max_pixels: int | None = None) -> ImageInputs:
        from transformers import AutoImageProcessor

        try:
            processor = AutoImageProcessor.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as err:
            raise ModelError(f"{path}: the vision-language model has no readable image processor "
                             f"(preprocessor_config.json): {err}") from err
        for token in (VISION_START, IMAGE_PAD, VISION_END):
            if token not in tokenizer.get_vocab():
                raise ModelError(f"{path}: the tokenizer has no {token} token, which a Qwen2-VL prompt needs")
        return cls(processor, tokenizer, min_pixels, max_pixels)

    @property
    def merge(self) -> int:
        return int(getattr(self.processor, "merge_size", 2))

    def process(self, images: list) -> VisionInputs:
        """Patches (N, D) and grids (I, 3) of a row's PIL images."""
        size = dict(self.processor.size)
        if self.min_pixels is not None:
            size["shortest_edge"] = self.min_pixels
        if self.max_pixels is not None:
            size["longest_edge"] = self.max_pixels
        out = self.processor(images=images, size=size, return_tensors="pt")
        return VisionInputs(out["pixel_values"], out["image_grid_thw"].long())

    def place(self, messages: list[dict], count: int, what: str) -> list[dict]:
        """The messages with each ``<image>`` marker replaced by the vision span. Images beyond the
        markers go, in order, before the text of the first user message (Trinity-RFT's rule in
        simple_mm_workflow); more markers than images are refused."""
        found = sum(m["content"].count(PLACEHOLDER) for m in messages if isinstance(m.get("content"), str))
        if found > count:
            raise DataError(f"{what}: the prompt has {found} {PLACEHOLDER} markers but the row only {count} image(s); "
                            f"put one {PLACEHOLDER} where each image goes, in order")
        span = VISION_START + IMAGE_PAD + VISION_END
        out = [{**m, "content": m["content"].replace(PLACEHOLDER, span)} if isinstance(m.get("content"), str) else m
               for m in messages]
        first_user = next((k for k, m in enumerate(out) if m.get("role") == "user" and isinstance(m.get("content"), str)), None)
        if found < count:
            if first_user is None:
                raise DataError(f"{what}: the row has {count - found} image(s) without an {PLACEHOLDER} marker and no user message to put them in")
            out[first_user] = {**out[first_user], "content": span * (count - found) + out[first_user]["content"]}
        return out

    def expand(self, ids: list[int], vision: VisionInputs) -> list[int]:
        """Prompt ids with each image's single ``<|image_pad|>`` repeated once per merged patch."""
        return self.expand_masked(ids, [0] * len(ids), vision)[0]

    def expand_masked(self, ids: list[int], mask: list[int], vision: VisionInputs) -> tuple[list[int], list[int]]:
        """`expand` of a sequence and its loss mask alike: each image token repeats its mask bit (an
        SFT row's images sit in its untrained prompt, so the bit is 0; `SFTDataset` checks that)."""
        pad = self.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        counts = iter((vision.image_grid_thw.prod(-1) // self.merge**2).tolist())
        out_ids: list[int] = []
        out_mask: list[int] = []
        for token, bit in zip(ids, mask, strict=True):
            times = int(next(counts)) if token == pad else 1
            out_ids.extend([token] * times)
            out_mask.extend([bit] * times)
        return out_ids, out_mask


def row_images(value: Any, what: str, base_dir: Path | None = None) -> list:
    """The PIL images of one `data.image_key` cell (None or empty: no image)."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        if hasattr(value, "tolist") and not isinstance(value, (bytes, str, dict)):
            value = value.tolist()  # a numpy object array, as pandas reads a parquet list column
        else:
            value = [value]
    return [load_image(v, f"{what}[{k}]", base_dir) for k, v in enumerate(value)]


def has_media(value: Any) -> bool:
    """Whether a media cell holds something (not null, not empty)."""
    return value is not None and not (hasattr(value, "__len__") and len(value) == 0)


