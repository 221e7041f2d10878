"""ROLL's agentic reward normalisation: trajectory scores normalised within a chosen grouping."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

# ROLL's methods, by what they subtract and divide by (its `_resolve_reward_norm_defaults`).
METHODS = {"identity": (False, False), "mean": (True, False), "mean_std": (True, True), "asym_clip": (True, True)}


def agentic_reward_norm(scores: Tensor, groups: Sequence[str] | None, method: str) -> Tensor:
    """Trajectory scores (B,) normalised within each group of `groups` (None: the whole batch).

    Formula:
        within each group G (or the batch): r_i = s_i - mean_G(s) with method mean;
        r_i = (s_i - mean_G(s)) / (std_G(s) + 1e-6) with mean_std or asym_clip (std unbiased), and
        r_i = 0 for the whole group when it has one trajectory or std_G(s) <= 1e-6; identity: r = s.
    Names:
        ROLL `reward_normalization.grouping` (traj_group_id: trajectories of one environment group;
        tags: one environment type; batch) and `reward_normalization.method`.
    Paper:
        ROLL (Wang et al. 2025, arXiv:2506.06122); group normalisation as GRPO (Shao et al. 2024,
        arXiv:2402.03300).
    Deviation:
        ROLL's asym_clip selects the same statistics as mean_std and clips nothing (alibaba/ROLL,
        roll/pipeline/agentic/agentic_config.py), so here too.

    >>> agentic_reward_norm(torch.tensor([1.0, 3.0, 5.0, 5.0]), ["a", "a", "b", "b"], "mean").tolist()
    [-1.0, 1.0, 0.0, 0.0]
    """
    subtract, divide = METHODS[method]
    if not subtract:
        return scores
    s = scores.float()
    out = torch.empty_like(s)
    keys = list(groups) if groups is not None else ["batch"] * len(s)
    for key in dict.fromkeys(keys):
        rows = torch.tensor([i for i, k in enumerate(keys) if k == key], device=s.device)
        x = s[rows]
        if not divide:
            out[rows] = x - x.mean()
            continue
        std = x.std() if len(x) > 1 else torch.zeros(())
        # a single trajectory or a group that scored alike carries no signal: 0, not a division by ~0
        out[rows] = (x - x.mean()) / (std + 1e-6) if len(x) > 1 and std.abs() > 1e-6 else torch.zeros_like(x)
    return out.to(scores.dtype)
