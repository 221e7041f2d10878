"""Group statistics for outcome-reward estimators (GRPO, RLOO, OPO, ...).

`group_index` marks which responses answer the same prompt: a 1-D array of ints or strings (verl's
`uid`), a list, or an integer tensor. We map it to dense ids once and compute every per-group
statistic with `index_add_`, instead of verl's Python loop over a dict of lists; the numbers agree
(tests/algorithms compare against a loop written the verl way).

Statistics are computed in float64 and returned as float64; callers cast the final advantage to
float32. Convention shared by verl, ROLL and Trinity-RFT: a group of one has mean 0 and std 1, so its
"advantage" is its raw score (GRPO divides that by 1 + epsilon).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import torch

GroupIndex = Sequence | np.ndarray | torch.Tensor


class GroupStats(NamedTuple):
    """Per-response view of its group's statistics, all shape (B,)."""

    ids: torch.Tensor  # (B,) int64 dense group id
    count: torch.Tensor  # (B,) float64 size of the response's group
    mean: torch.Tensor  # (B,) float64 group mean (0 for a group of one)
    std: torch.Tensor  # (B,) float64 unbiased group std (1 for a group of one)


def dense_group_ids(group_index: GroupIndex, batch_size: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Map arbitrary group labels to ids 0..G-1; returns `(ids (B,), G)`."""
    if group_index is None:
        raise ValueError(
            "this advantage estimator needs `group_index` (one group id per response, e.g. the prompt uid)"
        )
    if isinstance(group_index, torch.Tensor):
        if group_index.dim() != 1:
            raise ValueError(f"group_index must be 1-D, got shape {tuple(group_index.shape)}")
        _, inverse = torch.unique(group_index.cpu(), return_inverse=True)
    else:
        arr = np.asarray(group_index)
        if arr.ndim != 1:
            raise ValueError(f"group_index must be 1-D, got shape {arr.shape}")
        _, inverse_np = np.unique(arr, return_inverse=True)
        inverse = torch.from_numpy(inverse_np.reshape(-1).astype(np.int64))
    if inverse.numel() != batch_size:
        raise ValueError(f"group_index has {inverse.numel()} entries but the batch has {batch_size} responses")
    num_groups = int(inverse.max()) + 1 if batch_size else 0
    return inverse.to(device=device, dtype=torch.long), num_groups


def group_sum(values: torch.Tensor, ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per-group sum, shape (G,)."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, ids, values)


def group_stats(scores: torch.Tensor, group_index: GroupIndex) -> GroupStats:
    """Mean and unbiased std of each response's group (float64), with the group-of-one convention."""
    scores64 = scores.detach().to(torch.float64)
    ids, num_groups = dense_group_ids(group_index, scores.shape[0], scores.device)
    count_g = group_sum(torch.ones_like(scores64), ids, num_groups)
    mean_g = group_sum(scores64, ids, num_groups) / count_g
    sq_dev = group_sum((scores64 - mean_g[ids]) ** 2, ids, num_groups)
    singleton = count_g <= 1
    std_g = torch.sqrt(sq_dev / torch.where(singleton, torch.ones_like(count_g), count_g - 1))
    mean_g = torch.where(singleton, torch.zeros_like(mean_g), mean_g)
    std_g = torch.where(singleton, torch.ones_like(std_g), std_g)
    return GroupStats(ids=ids, count=count_g[ids], mean=mean_g[ids], std=std_g[ids])
