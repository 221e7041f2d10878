"""Outcome-reward advantage estimators that compare responses within a prompt's group.

Each one reduces a response to one score, s_i = sum_t r_{i,t} (the sum of its token-level rewards),
computes a baseline from the other responses to the same prompt, and broadcasts the resulting
advantage over the response: A_{i,t} = a_i * m_{i,t}. Returns equal advantages (there is no critic).

All are called with the trainer's full keyword set and read only what their docstring lists under
"Reads"; everything runs without gradients and in float64, and returns float32.
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.algorithms.groups import dense_group_ids, group_stats, group_sum
from posttrain.algorithms.masked import masked_whiten
from posttrain.algorithms.registry import AdvantageOutput, register_advantage_estimator


def _scores(token_level_rewards: torch.Tensor) -> torch.Tensor:
    return token_level_rewards.detach().to(torch.float64).sum(dim=-1)  # (B,)


def _broadcast(per_response: torch.Tensor, response_mask: torch.Tensor) -> AdvantageOutput:
    adv = (per_response.to(torch.float32).unsqueeze(-1) * response_mask.to(torch.float32))  # (B, T)
    return AdvantageOutput(adv, adv.clone())


@register_advantage_estimator("grpo", aliases=("step_wise_grpo",))
@torch.no_grad()
def grpo_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    norm_adv_by_std: bool = True,
    epsilon: float = 1e-6,
    enable_step_norm: bool = False,
    turn_index: torch.Tensor | None = None,
    std_cal_level: str = "group",
    **_: Any,
) -> AdvantageOutput:
    """GRPO: each response's score minus its group's mean, divided by the group's std.

    Formula:
        a_i = (s_i - mean_g) / (std_g + epsilon), with std_g the unbiased (n-1) std of the group;
        with norm_adv_by_std=False (Dr.GRPO) a_i = s_i - mean_g. A group of one has mean 0, std 1.
        With std_cal_level="batch" the divisor is the batch's: a_i = (s_i - mean_g) / (std_B + epsilon),
        std_B the unbiased std of all B scores the estimator is given (1 when B <= 1); the mean stays
        the group's (a group of one: 0). As Trinity-RFT's grpo `std_cal_level: batch` computes it
        (group mean, batch std; Hu et al. 2025, "Tricks or Traps? A Deep Dive into RL for LLM
        Reasoning", arXiv:2508.08221). Read only with norm_adv_by_std.
        With enable_step_norm, a_i is divided by K_i, the number of turns of row i (1 for a row
        without turn records), so each turn of a K-turn episode carries a_i / K_i.
    Names:
        verl `algorithm.adv_estimator=grpo` (+ `norm_adv_by_std_in_grpo`); ROLL `adv_estimator: grpo`
        (its RLVR pipeline: group reward normalisation then returns; its agentic pipeline's grpo is
        reinforce over its reward_normalization, which the ROLL dialect writes so); Trinity-RFT `advantage_fn: grpo`, and its
        `step_wise_grpo` (algorithm_type `multi_step_grpo`, + `enable_step_norm`) on an agentic
        stage, where one row holds all turns of an episode and s_i is the sum of their rewards
        (Trinity: the last step's reward). Trinity's `std_threshold` is dynamic sampling with a
        std bound (algorithm.filter_groups.std_threshold); its `std_cal_level` is std_cal_level here.
    Paper:
        Shao et al. 2024, DeepSeekMath, arXiv:2402.03300. Dr.GRPO: Liu et al. 2025, arXiv:2503.20783.
    Reads:
        token_level_rewards, response_mask, group_index, norm_adv_by_std (True), epsilon (1e-6),
        enable_step_norm (False), turn_index (an agentic batch's (B, T) turn of each model token),
        std_cal_level ("group" or "batch").
    """
    if std_cal_level not in ("group", "batch"):
        raise ValueError(f"std_cal_level must be 'group' or 'batch', got {std_cal_level!r}")
    s = _scores(token_level_rewards)
    g = group_stats(s, group_index)
    # the batch's std: unbiased over every response's score, 1 for a batch of one (as a group of one)
    std = g.std if std_cal_level == "group" else (s.std() if s.numel() > 1 else torch.ones((), dtype=s.dtype)).expand_as(s)
    a = (s - g.mean) / (std + epsilon) if norm_adv_by_std else s - g.mean
    if enable_step_norm and turn_index is not None:
        # Trinity broadcasts the last step's advantage to each of the run's K experiences divided by K;
        # here the K turns share one row, so the row's advantage is divided once. Turns are 0..K-1.
        turns = (turn_index.max(dim=-1).values + 1).clamp(min=1).to(torch.float64)  # (B,)
        a = a / turns
    return _broadcast(a, response_mask)


@register_advantage_estimator("gdpo")
@torch.no_grad()
def gdpo_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    reward_components: torch.Tensor | None = None,
    reward_weights: list[float] | None = None,
    norm_adv_by_std: bool = True,
    epsilon: float = 1e-6,
    **_: Any,
) -> AdvantageOutput:
    """GDPO: GRPO on each reward component separately, the weighted sum, then whitened over the batch.

    Formula:
        for each component k of K (the reward function's named parts, algorithm.gdpo_reward_keys),
        a_{i,k} = the GRPO advantage of the scores s_{i,k} (`grpo_advantage`: group mean, unbiased
        group std + epsilon; norm_adv_by_std=False leaves out the std); A_{i,t} = w_k-weighted sum
        over k of a_{i,k} m_{i,t}, then whitened over every valid token of the batch:
        (A - mean) / sqrt(var + 1e-8) (unbiased masked variance), times the mask. A component that is
        large on every row no longer swamps one that tells responses apart. Without components the
        one component is the response's summed token-level reward. Weights default to 1 each.
    Names:
        verl `algorithm.adv_estimator=gdpo` with `algorithm.gdpo_reward_keys` and
        `gdpo_reward_weights`; not in ROLL or Trinity-RFT.
    Paper:
        GDPO: Group reward-Decoupled Normalization Policy Optimization, arXiv:2601.05242.
    Reads:
        token_level_rewards (when no components), response_mask, group_index, reward_components
        ((B, K) float), reward_weights (K floats or None), norm_adv_by_std (True), epsilon (1e-6).
    """
    mask = response_mask.to(torch.float32)
    parts = [token_level_rewards.detach().to(torch.float64).sum(-1)] if reward_components is None else \
        list(reward_components.detach().to(torch.float64).unbind(-1))  # K tensors (B,)
    weights = [1.0] * len(parts) if reward_weights is None else [float(w) for w in reward_weights]
    if len(weights) != len(parts):
        raise ValueError(f"{len(weights)} reward weights for {len(parts)} reward components")
    total = torch.zeros_like(mask)
    for weight, scores in zip(weights, parts):
        per_row = grpo_advantage(token_level_rewards=scores.unsqueeze(-1), response_mask=mask, group_index=group_index,
                                 norm_adv_by_std=norm_adv_by_std, epsilon=epsilon).advantages  # (B, T)
        total = total + weight * per_row
    adv = masked_whiten(total, mask) * mask
    return AdvantageOutput(adv, adv.clone())


@register_advantage_estimator("grpo_passk")
@torch.no_grad()
def grpo_passk_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    norm_adv_by_std: bool = True,
    epsilon: float = 1e-6,
    **_: Any,
) -> AdvantageOutput:
    """Pass@k GRPO: only the best response of each group is credited, by its margin over the runner-up.

    Formula:
        a_i = (s_max - s_second) / (std_g + epsilon) for the group's best response i (first on ties),
        0 for the others; without the std division when norm_adv_by_std=False.
    Names:
        verl `grpo_passk`; not in ROLL or Trinity-RFT.
    Paper:
        arXiv:2503.19595, the paper verl's implementation cites for optimising pass@k by crediting
        only a group's best sample.
    Reads:
        token_level_rewards, response_mask, group_index, norm_adv_by_std (True), epsilon (1e-6).
        Every group needs at least two responses.
    """
    s = _scores(token_level_rewards)
    g = group_stats(s, group_index)
    num_groups = int(g.ids.max()) + 1 if s.numel() else 0
    if bool((g.count < 2).any()):
        raise ValueError("grpo_passk needs at least 2 responses per group (set rollout.n >= 2)")
    a = torch.zeros_like(s)
    for gid in range(num_groups):
        members = torch.nonzero(g.ids == gid).squeeze(-1)
        vals = s[members]
        order = torch.argsort(-vals, stable=True)
        best, second = members[order[0]], members[order[1]]
        margin = s[best] - s[second]
        a[best] = margin / (g.std[best] + epsilon) if norm_adv_by_std else margin
    return _broadcast(a, response_mask)


@register_advantage_estimator("rloo")
@torch.no_grad()
def rloo_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_index: Any, **_: Any
) -> AdvantageOutput:
    """RLOO: each response's score minus the mean score of the *other* responses to its prompt.

    Formula:
        a_i = s_i - (sum_{j != i} s_j) / (n - 1) = n / (n - 1) * (s_i - mean_g); a group of one keeps
        its raw score (as in verl).
    Names:
        verl `rloo`; Trinity-RFT `rloo`; not in ROLL.
    Paper:
        Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization for Learning
        from Human Feedback in LLMs, arXiv:2402.14740 (Kool et al. 2019 for the estimator).
    Reads:
        token_level_rewards, response_mask, group_index.
    """
    s = _scores(token_level_rewards)
    g = group_stats(s, group_index)
    n = g.count
    a = torch.where(n > 1, (s - g.mean) * n / torch.clamp(n - 1, min=1), s)
    return _broadcast(a, response_mask)


@register_advantage_estimator("opo")
@torch.no_grad()
def opo_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_index: Any, **_: Any
) -> AdvantageOutput:
    """OPO: the baseline is the length-weighted mean score of the group.

    Formula:
        b_g = sum_j |y_j| s_j / sum_j |y_j| over the group (|y| = valid tokens); a_i = s_i - b_g;
        a group of one has baseline 0.
    Names:
        verl `opo`; not in ROLL or Trinity-RFT.
    Paper:
        Hao et al. 2025, On-Policy RL with Optimal Reward Baseline, arXiv:2505.23585.
    Reads:
        token_level_rewards, response_mask, group_index.
    """
    s = _scores(token_level_rewards)
    lengths = response_mask.detach().to(torch.float64).sum(dim=-1)  # (B,)
    ids, num_groups = dense_group_ids(group_index, s.shape[0], s.device)
    count = group_sum(torch.ones_like(s), ids, num_groups)
    weighted = group_sum(lengths * s, ids, num_groups)
    total_len = group_sum(lengths, ids, num_groups)
    baseline = weighted / torch.where(total_len == 0, torch.ones_like(total_len), total_len)
    baseline = torch.where(count > 1, baseline, torch.zeros_like(baseline))
    return _broadcast(s - baseline[ids], response_mask)


@register_advantage_estimator("gpg")
@torch.no_grad()
def gpg_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    f_norm: float = 1.0,
    **_: Any,
) -> AdvantageOutput:
    """GPG: group-mean baseline, rescaled by the share of responses with a non-zero score.

    Formula:
        alpha = B / max(#{i : s_i != 0}, 1) over the whole batch; a_i = alpha * (s_i - mean_g) / f_norm;
        a group of one has mean 0.
    Names:
        verl `gpg` (estimator and loss); not in ROLL or Trinity-RFT.
    Paper:
        Chu et al. 2025, GPG: A Simple and Strong Reinforcement Learning Baseline for Model
        Reasoning, arXiv:2504.02546.
    Reads:
        token_level_rewards, response_mask, group_index, f_norm (1.0).
    """
    s = _scores(token_level_rewards)
    g = group_stats(s, group_index)
    alpha = s.shape[0] / max(int(torch.count_nonzero(s)), 1)
    return _broadcast(alpha * (s - g.mean) / f_norm, response_mask)


@register_advantage_estimator("reinforce_plus_plus_baseline", aliases=("reinforceplusplus_baseline",))
@torch.no_grad()
def reinforce_plus_plus_baseline_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_index: Any, **_: Any
) -> AdvantageOutput:
    """REINFORCE++-baseline: subtract the group mean, then whiten over all valid tokens of the batch.

    Formula:
        a_i = s_i - mean_g (a group of one has mean 0); A = whiten(a_i * m_{i,t}) * m_{i,t}, where
        whiten uses the batch's masked mean and unbiased variance: (x - mu) / sqrt(var + 1e-8).
    Names:
        verl `reinforce_plus_plus_baseline`; not in ROLL or Trinity-RFT.
    Paper:
        Hu 2025, REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models,
        arXiv:2501.03262.
    Reads:
        token_level_rewards, response_mask, group_index.
    """
    s = _scores(token_level_rewards)
    g = group_stats(s, group_index)
    mask = response_mask.to(torch.float32)
    centred = (s - g.mean).to(torch.float32).unsqueeze(-1) * mask  # (B, T)
    adv = masked_whiten(centred, mask) * mask
    return AdvantageOutput(adv, adv.clone())


@register_advantage_estimator("opmd")
@torch.no_grad()
def opmd_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    opmd_baseline: str = "mean",
    tau: float = 1.0,
    **_: Any,
) -> AdvantageOutput:
    """OPMD: score minus a group baseline that is either the mean or a soft maximum of the group.

    Formula:
        a_i = s_i - b_g with b_g = mean_g(s) (`opmd_baseline="mean"`, default) or
        b_g = tau * log(mean_j exp(s_j / tau)) (`"logavgexp"`); a group of one has baseline 0.
    Names:
        Trinity-RFT `advantage_fn: opmd` (args `opmd_baseline`, `tau`); not in verl or ROLL.
    Paper:
        Trinity-RFT's online policy mirror descent (Pan et al. 2025, Trinity-RFT, arXiv:2505.17826;
        Tomar et al. 2020, Mirror Descent Policy Optimization, arXiv:2005.09814).
    Reads:
        token_level_rewards, response_mask, group_index, opmd_baseline ("mean"), tau (1.0).
    """
    s = _scores(token_level_rewards)
    if opmd_baseline == "mean":
        baseline = group_stats(s, group_index).mean
    elif opmd_baseline == "logavgexp":
        ids, num_groups = dense_group_ids(group_index, s.shape[0], s.device)
        count = group_sum(torch.ones_like(s), ids, num_groups)
        shift = torch.full((num_groups,), float("-inf"), dtype=s.dtype).scatter_reduce(0, ids, s / tau, "amax")
        lse = torch.log(group_sum(torch.exp(s / tau - shift[ids]), ids, num_groups)) + shift
        baseline_g = tau * (lse - torch.log(count))
        baseline = torch.where(count > 1, baseline_g, torch.zeros_like(baseline_g))[ids]
    else:
        raise ValueError(f"opmd_baseline must be 'mean' or 'logavgexp', got {opmd_baseline!r}")
    return _broadcast(s - baseline, response_mask)
