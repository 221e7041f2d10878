"""Video frames for a Qwen2-VL / Qwen2.5-VL policy: which frames of a file, at what size, as patches.

Groundwork of video rows (not yet wired into rows, rollout or training: the ROLL dialect still refuses
the video keys). The rules are those ROLL's vision-language pipeline applies through its copy of
qwen-vl-utils (roll/utils/qwen_vl_utils.py, ``smart_nframes`` and ``fetch_video``):

- frames: ``duration x fps`` sampled frames, at least ``min_frames`` and at most ``max_frames`` (both
  rounded to a multiple of 2, the family's temporal patch) and the file's own count, then rounded
  down to a multiple of 2; they are spread evenly over the file (``linspace`` of the frame indices,
  rounded). The frame rate they stand for is ``frames / total x source fps``.
- size: every frame is resized (bicubic, antialiased) to a multiple of ``patch x merge`` pixels per
  side near its own aspect, its area within ``[min_pixels, max_pixels]``, where ``max_pixels`` is
  also capped by ``total_pixels / frames x 2`` (a budget for the whole video) and by 768 merged
  tokens per frame, but never below ``1.05 x min_pixels``.
- patches: frames are rescaled and normalised as the image processor does images, each pair of
  frames is one temporal patch, and patches are laid out as the family's video processor lays
  them out (grid ``(frames / 2, height / patch, width / patch)``), so two equal frames give the
  patches of that frame as an image.

PyAV (the ``video`` extra) decodes the files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from posttrain.errors import DataError

FRAME_FACTOR = 2  # frames per temporal patch of Qwen2-VL / Qwen2.5-VL
DEFAULT_FPS = 2.0
DEFAULT_MIN_FRAMES = 4
DEFAULT_MAX_FRAMES = 768
VIDEO_MIN_TOKENS = 128  # merged tokens per frame: qwen-vl-utils' default min_pixels
VIDEO_MAX_TOKENS = 768  # and its cap on max_pixels


@dataclass(frozen=True)
class FrameRule:
    """How a video's frames are chosen and sized (None: qwen-vl-utils' default)."""

    fps: float = DEFAULT_FPS
    min_frames: int = DEFAULT_MIN_FRAMES
    max_frames: int | None = None  # None: DEFAULT_MAX_FRAMES (or the file's count)
    min_pixels: int | None = None
    max_pixels: int | None = None
    total_pixels: int | None = None


def frame_count(total: int, source_fps: float, rule: FrameRule) -> int:
    """How many frames of a ``total``-frame file at ``source_fps`` are sampled (module docstring).

    >>> frame_count(8, 4.0, FrameRule(fps=2.0))   # 2 s x 2 fps = 4
    4
    >>> frame_count(100, 10.0, FrameRule(fps=2.0, max_frames=6))
    6
    """
    low = math.ceil(rule.min_frames / FRAME_FACTOR) * FRAME_FACTOR
    high = math.floor((rule.max_frames if rule.max_frames is not None else min(DEFAULT_MAX_FRAMES, total)) / FRAME_FACTOR) * FRAME_FACTOR
    wanted = total / source_fps * rule.fps
    count = math.floor(min(min(max(wanted, low), high), total) / FRAME_FACTOR) * FRAME_FACTOR
    if not FRAME_FACTOR <= count <= total:
        raise DataError(f"a video of {total} frames gives {count} sampled frames; it needs at least {FRAME_FACTOR} "
                        f"(raise the frame rate or min_frames, or use a longer video)")
    return count


def _round_to(x: float, f: int) -> int:
    return round(x / f) * f


def frame_size(height: int, width: int, frames: int, factor: int, rule: FrameRule) -> tuple[int, int]:
    """(height, width) every sampled frame is resized to (module docstring); ``factor`` is the
    family's patch x merge (28 for Qwen2-VL's 14-pixel patches).

    >>> frame_size(100, 200, 4, 28, FrameRule(min_pixels=28 * 28, max_pixels=56 * 56))
    (28, 56)
    """
    low = rule.min_pixels if rule.min_pixels is not None else VIDEO_MIN_TOKENS * factor * factor
    budget = rule.total_pixels if rule.total_pixels is not None else 128000 * factor * factor * 0.9
    high = max(min(VIDEO_MAX_TOKENS * factor * factor, budget / frames * FRAME_FACTOR), int(low * 1.05))
    if rule.max_pixels is not None:
        high = min(rule.max_pixels, high)
    if max(height, width) / min(height, width) > 200:
        raise DataError(f"a video of {width} x {height} pixels: the aspect ratio must be below 200")
    h, w = max(factor, _round_to(height, factor)), max(factor, _round_to(width, factor))
    if h * w > high:
        beta = math.sqrt(height * width / high)
        h, w = math.floor(height / beta / factor) * factor, math.floor(width / beta / factor) * factor
    elif h * w < low:
        beta = math.sqrt(low / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def read_frames(path: str | Path, rule: FrameRule) -> tuple[np.ndarray, float]:
    """The sampled frames (T, H, W, 3) uint8 of a video file and the frame rate they stand for."""
    try:
        import av
    except ImportError as err:
        raise DataError("reading video rows needs PyAV: pip install 'posttrain[video]'") from err
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate
            decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
    except (av.error.FFmpegError, IndexError, OSError) as err:
        raise DataError(f"{path}: cannot read the video: {err}") from err
    if not decoded or not rate:
        raise DataError(f"{path}: the video has no frames or no frame rate")
    count = frame_count(len(decoded), float(rate), rule)
    index = torch.linspace(0, len(decoded) - 1, count).round().long().tolist()
    return np.stack([decoded[i] for i in index]), count / len(decoded) * float(rate)


def resize_frames(frames: np.ndarray, height: int, width: int) -> Tensor:
    """(T, 3, height, width) float frames, bicubic with antialiasing (torchvision's resize of a tensor)."""
    video = torch.from_numpy(frames).permute(0, 3, 1, 2).float()  # (T, C, H, W)
    out = torch.nn.functional.interpolate(video, size=(height, width), mode="bicubic", antialias=True, align_corners=False)
    return out.clamp(0, 255).round()  # uint8 pixels again, as the resized frames the processor reads are


def video_patches(frames: Tensor, processor) -> tuple[Tensor, Tensor]:
    """Patches (N, D) and grid (1, 3) of resized frames (T, 3, H, W), laid out as the family's video
    processor does, with the image processor's rescale, mean and std."""
    p, m, tp = int(processor.patch_size), int(processor.merge_size), int(processor.temporal_patch_size)
    if frames.shape[0] % tp:  # the last frame repeated up to a whole temporal patch
        frames = torch.cat([frames, frames[-1:].expand(tp - frames.shape[0] % tp, -1, -1, -1)])
    mean = torch.tensor(processor.image_mean, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(processor.image_std, dtype=torch.float32).view(1, -1, 1, 1)
    x = (frames * float(processor.rescale_factor) - mean) / std  # (T, C, H, W)
    t, c, h, w = x.shape
    gt, gh, gw = t // tp, h // p, w // p
    x = x.reshape(gt, tp, c, gh // m, m, p, gw // m, m, p)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # (gt, gh/m, gw/m, m, m, C, tp, p, p)
    return x.reshape(gt * gh * gw, c * tp * p * p), torch.tensor([[gt, gh, gw]], dtype=torch.long)


def seconds_per_grid(processor, sample_fps: float) -> float:
    """Seconds one temporal patch spans (Qwen2.5-VL's second_per_grid_ts): temporal patch / sampled fps."""
    return int(processor.temporal_patch_size) / sample_fps
