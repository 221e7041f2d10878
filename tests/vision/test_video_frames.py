"""Video frames as ROLL's vision-language pipeline picks and sizes them (posttrain.data.videos): the
sampled frame count and size follow fps / min_frames / max_frames and min / max / total pixels, PyAV
reads the chosen frames of a file written here, and two equal frames patch as that frame's image."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posttrain.data.videos import FrameRule, frame_count, frame_size, read_frames, resize_frames, seconds_per_grid, video_patches
from posttrain.errors import DataError

av = pytest.importorskip("av", reason="PyAV (the video extra) reads video files")


def write_video(path, frames: int = 8, fps: int = 4, size: tuple[int, int] = (24, 16)) -> None:
    """A lossless video whose frame k is one colour, (30k, 100, 255 - 30k)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "bgr0"
        for k in range(frames):
            image = np.full((size[1], size[0], 3), (30 * k, 100, 255 - 30 * k), dtype=np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode())


@pytest.mark.parametrize(("total", "source_fps", "rule", "expected"), [
    (8, 4.0, FrameRule(fps=2.0), 4),  # 2 s x 2 fps
    (8, 4.0, FrameRule(fps=4.0), 8),
    (100, 10.0, FrameRule(fps=2.0), 20),
    (100, 10.0, FrameRule(fps=2.0, max_frames=7), 6),  # max_frames rounded down to a multiple of 2
    (100, 10.0, FrameRule(fps=0.1, min_frames=5), 6),  # 1 frame wanted; min_frames rounded up to 6
    (9, 1.0, FrameRule(fps=5.0), 8),  # never more than the file has, then even
])
def test_the_frame_count_follows_fps_and_the_frame_bounds(total, source_fps, rule, expected):
    assert frame_count(total, source_fps, rule) == expected


def test_too_few_frames_is_one_clear_error():
    with pytest.raises(DataError, match="at least 2"):
        frame_count(1, 1.0, FrameRule())


def test_the_frame_size_follows_min_max_and_total_pixels():
    base = frame_size(280, 560, 4, 28, FrameRule(min_pixels=28 * 28, max_pixels=10**6))
    assert base == (280, 560)  # already a multiple of 28, within the bounds
    assert frame_size(280, 560, 4, 28, FrameRule(min_pixels=28 * 28, max_pixels=56 * 112)) == (56, 112)
    assert frame_size(28, 56, 4, 28, FrameRule(min_pixels=112 * 224)) == (112, 224)
    # total_pixels caps each frame at total / frames x 2: 4 frames in 2 x 56 x 112 pixels
    assert frame_size(280, 560, 4, 28, FrameRule(min_pixels=28 * 28, total_pixels=2 * 56 * 112)) == (56, 112)
    # more frames, a smaller share of the same budget each
    assert frame_size(280, 560, 16, 28, FrameRule(min_pixels=28 * 28, total_pixels=2 * 56 * 112)) == (28, 56)


def test_pyav_reads_the_evenly_spread_frames(tmp_path):
    write_video(tmp_path / "v.mkv")
    frames, fps = read_frames(tmp_path / "v.mkv", FrameRule(fps=2.0))
    assert frames.shape == (4, 16, 24, 3) and fps == pytest.approx(2.0)
    # linspace(0, 7, 4) rounded: frames 0, 2, 5, 7
    assert [int(round(frames[i, 0, 0, 0] / 30)) for i in range(4)] == [0, 2, 5, 7]
    frames, fps = read_frames(tmp_path / "v.mkv", FrameRule(fps=4.0))
    assert frames.shape[0] == 8 and fps == pytest.approx(4.0)
    with pytest.raises(DataError, match="cannot read the video"):
        (tmp_path / "bad.mkv").write_bytes(b"not a video")
        read_frames(tmp_path / "bad.mkv", FrameRule())


def test_two_equal_frames_patch_as_that_frame_image(tiny_vl_dir):
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(tiny_vl_dir), local_files_only=True)
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, size=(16, 24, 3), dtype=np.uint8)
    image = processor(images=[frame], do_resize=False, return_tensors="pt")
    frames = resize_frames(np.stack([frame, frame]), 16, 24)  # the same size: the pixels as they are
    assert torch.equal(frames[0].permute(1, 2, 0).to(torch.uint8), torch.from_numpy(frame))
    pixels, grid = video_patches(frames, processor)
    assert grid.tolist() == image["image_grid_thw"].tolist()
    torch.testing.assert_close(pixels, image["pixel_values"].float(), rtol=0, atol=1e-5)
    # four different frames: two temporal patches, each its own pair of frames
    other = rng.integers(0, 256, size=(16, 24, 3), dtype=np.uint8)
    pixels, grid = video_patches(resize_frames(np.stack([frame, frame, other, other]), 16, 24), processor)
    assert grid.tolist() == [[2, 4, 6]]
    half = pixels.shape[0] // 2
    torch.testing.assert_close(pixels[:half], image["pixel_values"].float(), rtol=0, atol=1e-5)
    assert seconds_per_grid(processor, 2.0) == processor.temporal_patch_size / 2.0
