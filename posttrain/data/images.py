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

import torch


from posttrain.data.videos import FrameRule, frame_size, read_frames, resize_frames, seconds_per_grid, video_patches
from posttrain.errors import DataError, ModelError
from posttrain.records import VisionInputs

PLACEHOLDER = "<image>"  # where a row's prompt puts each of its images (verl's convention)
VIDEO_PLACEHOLDER = "<video>"  # and each of its videos
VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"
VIDEO_PAD = "<|video_pad|>"


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
    frames: FrameRule = FrameRule()  # how a video's frames are sampled and sized (data.video_*)
    video_folder: str | None = None  # relative video paths are joined to it (data.video_folder)

    @classmethod
    def from_model_dir(cls, path: str | Path, tokenizer: Any, *, min_pixels: int | None = None,
                       max_pixels: int | None = None, frames: FrameRule = FrameRule(),
                       video_folder: str | None = None) -> ImageInputs:
        from transformers import AutoImageProcessor

        try:
            processor = AutoImageProcessor.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as err:
            raise ModelError(f"{path}: the vision-language model has no readable image processor "
                             f"(preprocessor_config.json): {err}") from err
        for token in (VISION_START, IMAGE_PAD, VISION_END, VIDEO_PAD):
            if token not in tokenizer.get_vocab():
                raise ModelError(f"{path}: the tokenizer has no {token} token, which a Qwen2-VL prompt needs")
        return cls(processor, tokenizer, min_pixels, max_pixels, frames, video_folder)

    @property
    def merge(self) -> int:
        return int(getattr(self.processor, "merge_size", 2))

    def process(self, images: list, videos: list[tuple[Any, float]] = ()) -> VisionInputs:
        """Patches (N, D) and grids (I, 3) of a row's PIL images, and of its videos (sampled frames
        (T, H, W, 3) and the frame rate they stand for, `posttrain.data.videos.read_frames`)."""
        if images:
            size = dict(self.processor.size)
            if self.min_pixels is not None:
                size["shortest_edge"] = self.min_pixels
            if self.max_pixels is not None:
                size["longest_edge"] = self.max_pixels
            out = self.processor(images=images, size=size, return_tensors="pt")
            pixels, grid = out["pixel_values"], out["image_grid_thw"].long()
        else:
            depth = 3 * int(self.processor.temporal_patch_size) * int(self.processor.patch_size) ** 2
            pixels, grid = torch.zeros(0, depth), torch.zeros(0, 3, dtype=torch.long)
        if not videos:
            return VisionInputs(pixels, grid)
        factor = int(self.processor.patch_size) * self.merge
        parts = []
        for frames, fps in videos:
            height, width = frame_size(frames.shape[1], frames.shape[2], frames.shape[0], factor, self.frames)
            parts.append(video_patches(resize_frames(frames, height, width), self.processor))
        seconds = torch.tensor([seconds_per_grid(self.processor, fps) for _, fps in videos])
        return VisionInputs(pixels, grid, torch.cat([p for p, _ in parts]), torch.cat([g for _, g in parts]), seconds)

    def read_videos(self, value: Any, what: str, base_dir: Path | None = None) -> list[tuple[Any, float]]:
        """The sampled frames and their frame rate of each video of one `data.video_key` cell (paths;
        a relative one joined to data.video_folder, else to the data file's folder)."""
        if not has_media(value):
            return []
        if not isinstance(value, (list, tuple)):
            value = value.tolist() if hasattr(value, "tolist") and not isinstance(value, (bytes, str, dict)) else [value]
        out = []
        for k, v in enumerate(value):
            v = v.get("path") if isinstance(v, dict) else v
            if not isinstance(v, str):
                raise DataError(f"{what}[{k}]: expected a video file path, got {type(v).__name__}")
            path = Path(v).expanduser()
            if not path.is_absolute():
                folder = Path(self.video_folder).expanduser() if self.video_folder else base_dir
                path = folder / path if folder is not None else path
            if not path.is_file():
                raise DataError(f"{what}[{k}]: no video file at {path}" + ("" if self.video_folder else
                                "; relative paths are read from data.video_folder (unset: the data file's folder)"))
            try:
                out.append(read_frames(path, self.frames))
            except DataError as err:
                raise DataError(f"{what}[{k}]: {err}") from err
        return out

    def place(self, messages: list[dict], count: int, what: str, videos: int = 0) -> list[dict]:
        """The messages with each ``<image>`` marker replaced by the image span and each ``<video>``
        marker by the video span. Images (videos) beyond the markers go, in order, before the text
        of the first user message (Trinity-RFT's rule in simple_mm_workflow); more markers than
        images (videos) are refused."""
        out = messages
        for marker, pad, n, kind in ((VIDEO_PLACEHOLDER, VIDEO_PAD, videos, "video"), (PLACEHOLDER, IMAGE_PAD, count, "image")):
            out = _place(out, marker, VISION_START + pad + VISION_END, n, kind, what)
        return out

    def expand(self, ids: list[int], vision: VisionInputs) -> list[int]:
        """Prompt ids with each image's single ``<|image_pad|>`` repeated once per merged patch."""
        return self.expand_masked(ids, [0] * len(ids), vision)[0]

    def expand_masked(self, ids: list[int], mask: list[int], vision: VisionInputs) -> tuple[list[int], list[int]]:
        """`expand` of a sequence and its loss mask alike: each image token repeats its mask bit (an
        SFT row's images sit in its untrained prompt, so the bit is 0; `SFTDataset` checks that)."""
        pads = {self.tokenizer.convert_tokens_to_ids(IMAGE_PAD): iter((vision.image_grid_thw.prod(-1) // self.merge**2).tolist())}
        if vision.video_grid_thw is not None:
            pads[self.tokenizer.convert_tokens_to_ids(VIDEO_PAD)] = iter((vision.video_grid_thw.prod(-1) // self.merge**2).tolist())
        out_ids: list[int] = []
        out_mask: list[int] = []
        for token, bit in zip(ids, mask, strict=True):
            times = int(next(pads[token])) if token in pads else 1
            out_ids.extend([token] * times)
            out_mask.extend([bit] * times)
        return out_ids, out_mask


def _place(messages: list[dict], marker: str, span: str, count: int, kind: str, what: str) -> list[dict]:
    found = sum(m["content"].count(marker) for m in messages if isinstance(m.get("content"), str))
    if found > count:
        raise DataError(f"{what}: the prompt has {found} {marker} markers but the row only {count} {kind}(s); "
                        f"put one {marker} where each {kind} goes, in order")
    out = [{**m, "content": m["content"].replace(marker, span)} if isinstance(m.get("content"), str) else m for m in messages]
    first_user = next((k for k, m in enumerate(out) if m.get("role") == "user" and isinstance(m.get("content"), str)), None)
    if found < count:
        if first_user is None:
            raise DataError(f"{what}: the row has {count - found} {kind}(s) without a {marker} marker and no user message to put them in")
        out[first_user] = {**out[first_user], "content": span * (count - found) + out[first_user]["content"]}
    return out


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


