"""Group baselines that move away from the plain mean: AsymRE's shifted baseline and REC's balanced one.

Like the estimators in `advantages_outcome`, each reduces a response to its score s_i = sum_t r_{i,t},
compares it with its prompt group and broadcasts the result over the response's valid tokens.
Everything runs without gradients in float64 and returns float32.
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.algorithms.advantages_outcome import _broadcast, _scores
from posttrain.algorithms.groups import dense_group_ids, group_stats, group_sum
from posttrain.algorithms.registry import AdvantageOutput, register_advantage_estimator


@register_advantage_estimator("asymre")
@torch.no_grad()
def asymre_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    baseline_shift: float = -0.1,
    **_: Any,
) -> AdvantageOutput:
    """AsymRE: REINFORCE against the group mean moved by a fixed shift.

    Formula:
        a_i = s_i - (mean_g + delta), delta = `baseline_shift` (-0.1: a baseline below the mean makes
        positive samples weigh more than negative ones); a group of one has baseline 0 (no shift).
    Names:
        Trinity-RFT `advantage_fn: asymre` (`baseline_shift`), the estimator of `algorithm_type:
        asymre`; not in verl or ROLL.
    Paper:
        Arnal et al. 2025, Asymmetric REINFORCE for off-Policy Reinforcement Learning: Balancing
        positive and negative rewards, arXiv:2506.20520.
    Reads:
        token_level_rewards, response_mask, group_index, baseline_shift (-0.1).
    """
    s = _scores(token_level_rewards)
    g = group_stats(s, group_index)
    baseline = torch.where(g.count > 1, g.mean + baseline_shift, torch.zeros_like(s))
    return _broadcast(s - baseline, response_mask)


@register_advantage_estimator("rec")
@torch.no_grad()
def rec_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    std_normalize: bool = False,
    epsilon: float = 1e-6,
    **_: Any,
) -> AdvantageOutput:
    """REC: score minus the group mean, optionally divided by the group's population std.

    Formula:
        a_i = s_i - mean_g, or (s_i - mean_g) / (std_g + epsilon) with `std_normalize`, std_g the
        population (1/n) std of the group; a group of one has mean 0 and std 1.
    Names:
        Trinity-RFT `advantage_fn: rec` (`std_normalize`, `epsilon`), the estimator of
        `algorithm_type: rec`; not in verl or ROLL.
    Paper:
        Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm (2025), arXiv:2509.24203.
    Deviation:
        Trinity-RFT's `drop: balance` (randomly dropping surplus negative samples) is not provided.
    Reads:
        token_level_rewards, response_mask, group_index, std_normalize (False), epsilon (1e-6).
    """
    s = _scores(token_level_rewards)
    ids, num_groups = dense_group_ids(group_index, s.shape[0], s.device)
    count = group_sum(torch.ones_like(s), ids, num_groups)  # (G,)
    mean = group_sum(s, ids, num_groups) / count
    var = group_sum((s - mean[ids]) ** 2, ids, num_groups) / count  # population variance, as Trinity-RFT's
    single = count[ids] < 2
    mean_i = torch.where(single, torch.zeros_like(s), mean[ids])
    std_i = torch.where(single, torch.ones_like(s), var.sqrt()[ids])
    a = (s - mean_i) / (std_i + epsilon) if std_normalize else s - mean_i
    return _broadcast(a, response_mask)
