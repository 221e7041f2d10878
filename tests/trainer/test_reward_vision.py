"""The reward stage gives the detection scorer each row's image grids (extra_info["image_grid_thw"]),
by which it rescales a pixel-answering policy's boxes; other scorers' extra_info is unchanged."""

from __future__ import annotations

import torch

from posttrain.config import load_config
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.records import RolloutBatch, VisionInputs
from posttrain.trainer.rewarding import RewardStage

REPLY = "<think>a cat</think>\n<answer>\n[{'bbox_2d': [0, 0, 140, 280], 'label': 'cat'}]\n</answer>"
TRUTH = "<answer>[{'bbox_2d': [0, 0, 500, 500], 'label': 'cat'}]</answer>"
WEIGHTS = {"format_ratio": 0.1, "verifier_parm": {"det_verifier_normalized": True, "det_reward_ratio": {"iou_max_label_first": 1.0}}}


def _batch(tokenizer) -> RolloutBatch:
    """Two rows with the same pixel-box reply: the first with one 280 x 560 px image, the second without."""
    ids = tokenizer(REPLY, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    response = torch.tensor([ids, ids])  # (B, T)
    grid = torch.tensor([[1, 40, 20]])  # (I, 3) patches of 14 px
    return RolloutBatch(
        prompt_ids=torch.ones(2, 2, dtype=torch.long), prompt_mask=torch.ones(2, 2), response_ids=response,
        response_mask=torch.ones(response.shape), rollout_logprobs=torch.zeros(response.shape),
        weights_version=torch.zeros(2, dtype=torch.long), group_index=["u", "v"], data_source=["coco"] * 2,
        ground_truth=[TRUTH] * 2, extra_info=[{"reward_model": WEIGHTS}] * 2, raw_prompt=[None] * 2,
        vision=[VisionInputs(torch.zeros(800, 4), grid), None],
    )


def test_a_detection_worker_reads_each_row_s_first_image_grid():
    """The row's image grids reach the detection scorer's extra_info (and no other worker's), and a
    Qwen2.5-VL policy's pixel box is rescaled by them: 140 x 280 px of a 280 x 560 image is the truth."""
    tokenizer = build_tiny_tokenizer()
    batch = _batch(tokenizer)
    for overrides in (["reward.workers={det: {worker_cls: detection, tag_included: [coco], reward_kwargs: {patch_size: 14}}}"],
                      ["reward.custom_reward_function.name=detection", "reward.custom_reward_function.reward_kwargs={patch_size: 14}"]):
        stage = RewardStage(load_config(None, overrides), tokenizer)
        scores, _, _ = stage.score(batch, stage.decode(batch))
        stage.close()
        # rescaled: a perfect box, 1.0; the image-less row compares pixels with the grid: the format alone
        torch.testing.assert_close(scores, torch.tensor([1.0, 0.1 / 1.1]))
    seen = []
    other = RewardStage(load_config(None, []), tokenizer, lambda data_source, solution_str, ground_truth, extra_info=None: seen.append(extra_info) or 0.0)
    other.score(batch, stage.decode(batch))
    other.close()
    assert len(seen) == 2 and all("image_grid_thw" not in e for e in seen)
