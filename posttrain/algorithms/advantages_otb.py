"""Optimal token baseline (OTB): a per-token baseline weighted by each path's accumulated variance.

GRPO-style estimators give every token of a response one baseline; OTB gives token t its own, the
group's reward-to-go at t averaged with weights W_t, the policy-gradient variance a path has
accumulated up to t (a proxy built from sum_v pi(v)^2, which the actor computes in an extra pass
without gradients). Both estimators here run without gradients in float64 and return float32.
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.algorithms.groups import dense_group_ids
from posttrain.algorithms.registry import AdvantageOutput, EstimatorNeeds, register_advantage_estimator


def _reward_to_go(token_level_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1)  # (B, T) G_t = sum_{j>=t} r_j


def _path_weights(old_logprobs: torch.Tensor, sum_pi_squared: torch.Tensor, mask: torch.Tensor,
                  rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    """(B, T) W_t = sum_{j<=t} m_j * rho_j^2 * (1 - 2 pi_j + sum_v pi_v^2)."""
    w = 1 - 2 * old_logprobs.exp() + sum_pi_squared  # ||score||^2 of a softmax policy at the sampled token
    if rollout_is_weights is not None:  # truncated IS: the MSE-optimal weight carries rho^2
        w = w * rollout_is_weights.to(w.dtype) ** 2
    return (w * mask).cumsum(-1)


def _group_sum(values: torch.Tensor, ids: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(G, ...) the rows of `values` (B, ...) summed per group."""
    return values.new_zeros((n_groups, *values.shape[1:])).index_add_(0, ids, values)


def _baselines(returns: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor,
               counted: torch.Tensor, group_index: Any, epsilon: float, handle_zero_tail: bool) -> torch.Tensor:
    """(B, L) b_{g,t} = sum_i m G W / (sum_i m W + epsilon) over the counted rows of each group, column
    by column; 0 for a group of one. `handle_zero_tail` zeroes it on a group's unique longest row past
    the second-longest row's length, where only that row is left to average over."""
    ids, n_groups = dense_group_ids(group_index, returns.shape[0], returns.device)
    keep = (mask * counted.unsqueeze(-1)).to(returns.dtype)  # (B, L)
    num = _group_sum(returns * weights * keep, ids, n_groups)  # (G, L)
    den = _group_sum(weights * keep, ids, n_groups)  # (G, L)
    size = _group_sum(counted.to(returns.dtype), ids, n_groups)  # (G,)
    base = (num / (den + epsilon))[ids] * (size[ids] > 1).unsqueeze(-1)  # (B, L)
    if handle_zero_tail:
        for g in range(n_groups):
            rows = ((ids == g) & counted).nonzero(as_tuple=True)[0]
            if len(rows) < 2:
                continue
            lens = lengths[rows]
            top = lens.max()
            if int((lens == top).sum()) == 1:
                second = int(lens[lens < top].max())
                base[rows[lens == top], second:] = 0.0
    return base


@register_advantage_estimator("optimal_token_baseline", needs=EstimatorNeeds(sum_pi_squared=True))
@torch.no_grad()
def optimal_token_baseline_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    old_logprobs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = False,
    epsilon: float = 1e-8,
    **_: Any,
) -> AdvantageOutput:
    """Optimal token baseline: each token's reward-to-go minus a per-token, variance-weighted group mean.

    Formula:
        m the mask, pi = exp(old_logprob), rho the rollout IS weight (1 without rollout_is);
        reward-to-go G_{i,t} = sum_{j>=t} m_{i,j} r_{i,j};
        squared score norm w_{i,j} = rho_{i,j}^2 (1 - 2 pi_{i,j} + sum_v pi_{i,j}(v)^2);
        path variance so far W_{i,t} = sum_{j<=t} m_{i,j} w_{i,j};
        B_{g,t} = sum_{i in g} m_{i,t} G_{i,t} W_{i,t} / (sum_{i in g} m_{i,t} W_{i,t} + epsilon);
        A_{i,t} = (G_{i,t} - B_{g(i),t}) m_{i,t}; returns = G.
        Responses are aligned by absolute token position t. A group of one has B = 0 (A = G).
        With handle_zero_tail, B is 0 on a group's single longest response from the second-longest's
        length on. epsilon defaults to 1e-8, as verl.
    Names:
        verl `algorithm.adv_estimator=optimal_token_baseline` (verl also needs
        `actor.calculate_sum_pi_squared=True`; posttrain computes sum_v pi^2 whenever this estimator
        is chosen). The IS weights are `algorithm.rollout_is`'s, as verl's rollout_is_weights.
    Paper:
        none named in verl's source (verl core_algos.compute_optimal_token_baseline_advantage).
    Reads:
        token_level_rewards, response_mask, group_index, old_logprobs, sum_pi_squared,
        rollout_is_weights (None), handle_zero_tail (False), epsilon (1e-8).
    """
    mask = response_mask.to(torch.float64)
    returns = _reward_to_go(token_level_rewards.to(torch.float64), mask)  # (B, T)
    weights = _path_weights(old_logprobs.to(torch.float64), sum_pi_squared.to(torch.float64), mask, rollout_is_weights)
    every = torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device)  # (B,) empty rows count too, as verl
    base = _baselines(returns, weights, mask, mask.sum(-1).long(), every, group_index, epsilon, handle_zero_tail)
    return AdvantageOutput(((returns - base) * mask).float(), returns.float())


@register_advantage_estimator("tir_optimal_token_baseline", needs=EstimatorNeeds(sum_pi_squared=True))
@torch.no_grad()
def tir_optimal_token_baseline_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    old_logprobs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **_: Any,
) -> AdvantageOutput:
    """Optimal token baseline for multi-turn (tool-integrated) responses: as `optimal_token_baseline`,
    but responses are aligned by the index k of their k-th *counted* token, not by position.

    Formula:
        G, w, W as in `optimal_token_baseline`. Let t_i(k) be the position of row i's k-th token
        with m = 1 (tool outputs and other masked spans are skipped), n_i = sum_t m_{i,t}. Then
        B_{g,k} = sum_{i in g, k < n_i} G_{i,t_i(k)} W_{i,t_i(k)} / (sum_{i in g, k < n_i} W_{i,t_i(k)} + epsilon);
        A_{i,t_i(k)} = G_{i,t_i(k)} - B_{g(i),k}; A = 0 where m = 0; returns = G.
        Rows with no counted token join no group; a group of one has B = 0. handle_zero_tail (default
        True here, as verl) zeroes B on a group's single longest row from the second-longest's length on.
    Names:
        verl `algorithm.adv_estimator=tir_optimal_token_baseline` (tool-integrated reasoning: the
        mask is posttrain's train mask, whose tool-output tokens are 0 in a tool or agentic stage).
    Paper:
        none named in verl's source.
    Reads:
        token_level_rewards, response_mask, group_index, old_logprobs, sum_pi_squared,
        rollout_is_weights (None), handle_zero_tail (True), epsilon (1e-8).
    """
    mask = response_mask.to(torch.float64)
    returns = _reward_to_go(token_level_rewards.to(torch.float64), mask)  # (B, T)
    weights = _path_weights(old_logprobs.to(torch.float64), sum_pi_squared.to(torch.float64), mask, rollout_is_weights)
    # stable sort puts each row's counted tokens first, in order: a permutation per row
    order = torch.argsort((mask == 0).to(torch.int8), dim=-1, stable=True)  # (B, T)
    lengths = mask.sum(-1).long()  # (B,)
    packed = (torch.arange(mask.shape[1], device=mask.device) < lengths.unsqueeze(-1)).to(mask.dtype)  # (B, T)
    g_k, w_k = returns.gather(-1, order) * packed, weights.gather(-1, order) * packed  # (B, T) by k
    base = _baselines(g_k, w_k, packed, lengths, lengths > 0, group_index, epsilon, handle_zero_tail)
    adv = torch.zeros_like(returns).scatter(-1, order, g_k - base) * mask  # back to token positions
    return AdvantageOutput(adv.float(), returns.float())
