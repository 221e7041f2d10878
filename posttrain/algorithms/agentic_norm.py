"""ROLL's agentic reward normalisation: trajectory scores normalised within a chosen grouping."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

# ROLL's methods, by what they subtract and divide by (its `_resolve_reward_norm_defaults`).
METHODS = {"identity": (False, False), "mean": (True, False), "mean_std": (True, True), "asym_clip": (True, True)}
STAT_SCOPES = ("batch", "group")


def norm_scopes(method: str, grouping: str, mean_type: str | None = None, std_type: str | None = None) -> tuple[str | None, str | None]:
    """``(mean scope, std scope)``, each batch, group or None (not subtracted / not divided by).

    ROLL's rule: an explicit `norm_mean_type` / `norm_std_type` wins; one left null comes from the
    method, over the batch when grouping is batch and over the row's group otherwise.

    >>> norm_scopes("mean_std", "traj_group_id"), norm_scopes("mean", "batch"), norm_scopes("identity", "tags", std_type="batch")
    (('group', 'group'), ('batch', None), (None, 'batch'))
    """
    subtract, divide = METHODS[method]
    scope = "batch" if grouping == "batch" else "group"
    return (mean_type or (scope if subtract else None), std_type or (scope if divide else None))


def agentic_reward_norm(scores: Tensor, groups: Sequence[str] | None, method: str,
                        mean_type: str | None = None, std_type: str | None = None) -> Tensor:
    """Trajectory scores (B,) normalised within each group of `groups` (None: the whole batch).

    Formula:
        mu, sigma: the statistics of the scope `norm_scopes` picks (batch: all B scores, group: the
        row's group G; sigma unbiased);
        r_i = s_i - mu                           with a mean scope and no std scope;
        r_i = (s_i - mu) / (sigma + 1e-6)        with a std scope (mu = 0 without a mean scope),
        r_i = 0 for the whole group G when it has one trajectory or |sigma| <= 1e-6;
        r_i = s_i                                with neither (identity).
        method mean subtracts, mean_std and asym_clip subtract and divide.
    Names:
        ROLL `reward_normalization.grouping` (traj_group_id: trajectories of one environment group;
        tags: one environment type; batch), `reward_normalization.method`, and its newer
        `reward_normalization.norm_mean_type` / `norm_std_type`, which override what the method gives.
    Paper:
        ROLL (Wang et al. 2025, arXiv:2506.06122); group normalisation as GRPO (Shao et al. 2024,
        arXiv:2402.03300).
    Deviation:
        ROLL's asym_clip selects the same statistics as mean_std and clips nothing (alibaba/ROLL,
        roll/pipeline/agentic/agentic_config.py), so here too.

    >>> agentic_reward_norm(torch.tensor([1.0, 3.0, 5.0, 5.0]), ["a", "a", "b", "b"], "mean").tolist()
    [-1.0, 1.0, 0.0, 0.0]
    """
    grouping = "batch" if groups is None else "group"
    mean_scope, std_scope = norm_scopes(method, grouping, mean_type, std_type)
    if mean_scope is None and std_scope is None:
        return scores
    s = scores.float()
    out = torch.empty_like(s)
    keys = list(groups) if groups is not None else ["batch"] * len(s)
    batch_mean, batch_std = s.mean(), (s.std() if len(s) > 1 else torch.zeros(()))
    for key in dict.fromkeys(keys):
        rows = torch.tensor([i for i, k in enumerate(keys) if k == key], device=s.device)
        x = s[rows]
        mean = {"batch": batch_mean, "group": x.mean(), None: 0.0}[mean_scope]
        if std_scope is None:
            out[rows] = x - mean
            continue
        std = batch_std if std_scope == "batch" else (x.std() if len(x) > 1 else torch.zeros(()))
        # a single trajectory or a scope that scored alike carries no signal: 0, not a division by ~0
        out[rows] = (x - mean) / (std + 1e-6) if len(x) > 1 and std.abs() > 1e-6 else torch.zeros_like(x)
    return out.to(scores.dtype)
