"""Video rows through the vision-language forward (posttrain.models.vision): posttrain's log-probs of
a row with a video (and of one with an image and a video) equal the model family's own forward on the
same patches, the hf engine's rollout log-probs equal the actor's, and they depend on the frames."""

import dataclasses

import numpy as np
import torch
from transformers import AutoImageProcessor

from posttrain.data.videos import resize_frames, video_patches
from posttrain.models.loading import load_causal_lm, load_tokenizer
from posttrain.models.logprobs import batch_logprobs, response_logprobs
from posttrain.records import PromptBatch, VisionInputs
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.hf_engine import HFEngine

from tests.vision.conftest import colour_image


def _video(proc, seed: int, frames: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return video_patches(resize_frames(rng.integers(0, 256, size=(frames, 16, 24, 3), dtype=np.uint8), 16, 24), proc)


def _row(proc, video_seed: int, image: bool = False) -> VisionInputs:
    pixels, grid = _video(proc, video_seed)
    if image:
        out = proc(images=[colour_image((255, 0, 0))], return_tensors="pt")
        return VisionInputs(out["pixel_values"], out["image_grid_thw"], pixels, grid, torch.tensor([1.0]))
    return VisionInputs(torch.zeros(0, pixels.shape[1]), torch.zeros(0, 3, dtype=torch.long), pixels, grid, torch.tensor([1.0]))


def _prompts(tok, rows: list[VisionInputs | None]) -> PromptBatch:
    ids = []
    for v in rows:
        media = ""
        if v is not None:
            media += "".join("<|vision_start|>" + "<|image_pad|>" * (int(g.prod()) // 4) + "<|vision_end|>" for g in v.image_grid_thw)
            media += "".join("<|vision_start|>" + "<|video_pad|>" * (int(g.prod()) // 4) + "<|vision_end|>" for g in v.video_grid_thw)
        ids.append(tok(f"<|im_start|>user\n{media}what moves?<|im_end|>\n<|im_start|>assistant\n").input_ids)
    width = max(map(len, ids))
    input_ids = torch.tensor([[tok.pad_token_id] * (width - len(i)) + i for i in ids])  # (B, P)
    mask = torch.tensor([[0.0] * (width - len(i)) + [1.0] * len(i) for i in ids])  # (B, P)
    return PromptBatch(input_ids=input_ids, attention_mask=mask, vision=rows)


def test_video_logprobs_match_the_models_own_forward(tiny_vl_dir):
    model, tok = load_causal_lm(tiny_vl_dir), load_tokenizer(tiny_vl_dir)
    proc = AutoImageProcessor.from_pretrained(tiny_vl_dir)
    rows = [_row(proc, 0), _row(proc, 1, image=True), None]
    prompts = _prompts(tok, rows)
    response = torch.tensor([[10, 11, 12], [13, 14, 0], [15, 16, 17]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 1, 1]])
    got = response_logprobs(model, prompts.input_ids, prompts.attention_mask, response, mask, vision=prompts.vision).logprobs
    P = prompts.input_ids.shape[1]
    for b in (0, 1):
        v = rows[b]
        ids = torch.cat([prompts.input_ids[b:b + 1], response[b:b + 1]], 1)  # (1, S)
        types = (ids == model.config.image_token_id).int() + 2 * (ids == model.config.video_token_id).int()
        images = {"pixel_values": v.pixel_values, "image_grid_thw": v.image_grid_thw} if v.image_grid_thw.shape[0] else {}
        own = model(input_ids=ids, attention_mask=torch.cat([prompts.attention_mask[b:b + 1], mask[b:b + 1]], 1).long(),
                    pixel_values_videos=v.pixel_values_videos, video_grid_thw=v.video_grid_thw, mm_token_type_ids=types,
                    **images).logits.float()  # (1, S, V)
        expected = torch.log_softmax(own[0, P - 1:P + 2], -1).gather(-1, response[b, :, None]).squeeze(-1)
        assert torch.allclose(got[b] * mask[b], expected * mask[b], atol=1e-5), b


def test_engine_logprobs_on_video_rows_equal_the_actors_and_depend_on_the_frames(tiny_vl_dir):
    model, tok = load_causal_lm(tiny_vl_dir), load_tokenizer(tiny_vl_dir)
    proc = AutoImageProcessor.from_pretrained(tiny_vl_dir)
    prompts = _prompts(tok, [_row(proc, 0), None, _row(proc, 2, image=True)])
    out = HFEngine(model, tokenizer=tok).generate(prompts, SamplingParams(n=2, max_new_tokens=5), expected_version=0)
    assert [v is None for v in out.vision] == [False, False, True, True, False, False]
    actor = batch_logprobs(model, out).logprobs  # (B, T)
    assert float((actor - out.rollout_logprobs).abs().max()) < 1e-4
    other = _row(proc, 7)
    swapped = dataclasses.replace(out[:2], vision=[other, other])
    assert float((batch_logprobs(model, swapped).logprobs - actor[:2]).abs().max()) > 1e-3


def test_qwen25_vl_video_positions_follow_the_seconds_per_temporal_patch(tmp_path):
    from posttrain.models.tiny_vl import make_tiny_vl_model

    path = make_tiny_vl_model(tmp_path / "vl25", family="qwen2_5_vl")
    model, tok = load_causal_lm(path), load_tokenizer(path)
    proc = AutoImageProcessor.from_pretrained(path)
    pixels, grid = _video(proc, 0)
    empty = (torch.zeros(0, pixels.shape[1]), torch.zeros(0, 3, dtype=torch.long))
    response, mask = torch.tensor([[10, 11, 12]]), torch.ones(1, 3)
    logprobs = {}
    for seconds in (1.0, 0.5):
        v = VisionInputs(*empty, pixels, grid, torch.tensor([seconds]))
        prompts = _prompts(tok, [v])
        got = response_logprobs(model, prompts.input_ids, prompts.attention_mask, response, mask, vision=prompts.vision).logprobs
        ids = torch.cat([prompts.input_ids, response], 1)  # (1, S)
        own = model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values_videos=pixels, video_grid_thw=grid,
                    second_per_grid_ts=torch.tensor([seconds]), mm_token_type_ids=2 * (ids == model.config.video_token_id).int()).logits
        P = prompts.input_ids.shape[1]
        expected = torch.log_softmax(own[0, P - 1:P + 2].float(), -1).gather(-1, response[0, :, None]).squeeze(-1)
        assert torch.allclose(got[0], expected, atol=1e-5), seconds
        logprobs[seconds] = got
    # the time axis moved (1 s per patch: 2 steps; 0.5 s: 1 step), and with it the log-probs
    assert float((logprobs[1.0] - logprobs[0.5]).abs().max()) > 1e-6
