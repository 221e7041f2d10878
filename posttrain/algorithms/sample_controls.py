"""ROLL's sample filters: which responses the losses count (`sample_keep_mask`).

Its companion, ROLL's per-sample loss weights, is `posttrain.algorithms.shaping.sample_loss_weights`.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def sample_keep_mask(
    scores: Tensor, lengths: Tensor, max_length: int, group_index: Sequence[str], *,
    max_len_mask: bool = False, difficulty_mask: bool = False, low: float = 0.1, high: float = 0.95,
    error_max_len_clip: bool = False, error_threshold: int = 2**62,
    min_score: float | None = None, valid: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """(B,) float keep mask of the responses the losses count, and the share each filter kept.

    Formula:
        keep_i = 1, multiplied by, for each filter that is on:
        max_len_mask:       [L_i < max_length]  (a response at the budget was cut before its end)
        difficulty_mask:    [low < mean_{j in group(i)} s_j < high]  (all-solved or all-failed groups
                            teach nothing under group-relative advantages)
        error_max_len_clip: [s_i = 1 or (s_i = 0 and L_i < error_threshold)]
        min_score:          [s_i >= min_score]  (reward-ranked fine-tuning keeps the best responses)
        valid:              [valid_i]  (an agentic episode whose every action was well formed)
        with raw response scores s (B,) and response lengths L (B,) in tokens.
    Names:
        ROLL `max_len_mask`, `difficulty_mask` (+ `difficulty_low_threshold`, `difficulty_high_threshold`),
        `error_max_len_clip` (+ `error_max_len_threshold`): its `get_sample_level_mask`. `min_score` and
        `valid`: what Trinity-RFT's RAFT ALFWorld workflow keeps (reward >= 1, every step's tags parsed).
    Paper:
        Overlong filtering: DAPO (Yu et al. 2025, arXiv:2503.14476), section 3.4. ROLL (Wang et al.
        2025, arXiv:2506.06122). RAFT: Dong et al. 2023, RAFT: Reward rAnked FineTuning for Generative
        Foundation Model Alignment, arXiv:2304.06767.
    Deviation:
        ROLL leaves the rejected rows out of its policy and KL losses only; posttrain's trainer puts
        the mask into the batch's loss mask, so the entropy bonus and the critic skip them too
        (posttrain.trainer.advantages.mask_samples). As in ROLL, error_max_len_clip also drops every
        score other than exactly 0 or 1.

    >>> keep, _ = sample_keep_mask(torch.tensor([1., 0., 1., 1.]), torch.tensor([3, 8, 8, 2]), 8, ["a", "a", "b", "b"], max_len_mask=True)
    >>> keep.tolist()
    [1.0, 0.0, 0.0, 1.0]
    """
    keep = torch.ones_like(scores, dtype=torch.float32)  # (B,)
    metrics: dict[str, float] = {}
    if max_len_mask:
        fits = (lengths < max_length).float()  # a response at the budget was cut before its end
        keep, metrics["actor/max_len_mask_ratio"] = keep * fits, float(fits.mean())
    if difficulty_mask:
        groups = {g: i for i, g in enumerate(dict.fromkeys(group_index))}
        ids = torch.tensor([groups[g] for g in group_index], device=scores.device)  # (B,)
        sums = torch.zeros(len(groups), device=scores.device).index_add_(0, ids, scores.float())
        counts = torch.zeros(len(groups), device=scores.device).index_add_(0, ids, torch.ones_like(scores, dtype=torch.float32))
        mean = (sums / counts)[ids]  # (B,) the row's group mean score
        inside = ((mean > low) & (mean < high)).float()
        keep, metrics["actor/difficulty_mask_ratio"] = keep * inside, float(inside.mean())
    if error_max_len_clip:
        kept = ((scores == 0) & (lengths < error_threshold)) | (scores == 1)
        keep, metrics["actor/error_len_mask_ratio"] = keep * kept.float(), float(kept.float().mean())
    if min_score is not None:
        kept = (scores >= min_score).float()
        keep, metrics["actor/min_score_mask_ratio"] = keep * kept, float(kept.mean())
    if valid is not None:
        kept = valid.to(scores.device).float()
        keep, metrics["actor/valid_actions_mask_ratio"] = keep * kept, float(kept.mean())
    if metrics:
        metrics["actor/final_mask_ratio"] = float(keep.mean())
    return keep, metrics
