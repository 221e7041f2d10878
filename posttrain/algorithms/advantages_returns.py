"""Advantage estimators built from per-token discounted returns: GAE, REINFORCE, REINFORCE++, ReMax.

These walk the response backwards, so they honour token-level rewards (a KL penalty per token, a
process reward) and not only an outcome score. They assume right padding: valid tokens first, then
padding with mask 0. All run without gradients in float32 and return float32.
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.algorithms.masked import masked_whiten
from posttrain.algorithms.registry import AdvantageOutput, EstimatorNeeds, register_advantage_estimator


@register_advantage_estimator("gae", aliases=("ppo",), needs=EstimatorNeeds(values=True))
@torch.no_grad()
def gae_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    values: torch.Tensor | None,
    gamma: float = 1.0,
    lam: float = 1.0,
    gae_whiten: bool = True,
    **_: Any,
) -> AdvantageOutput:
    """GAE: exponentially weighted TD errors of a learned critic, computed backwards over valid tokens.

    Formula:
        delta_t = r_t + gamma * V_next - V_t;  A_t = delta_t + gamma * lam * A_next;  returns = A + V,
        where V_next and A_next come from the next *valid* token (a padded step neither moves V_next
        nor A_next). Then A is whitened over the batch's valid tokens (verl) unless gae_whiten=False
        (ROLL, which whitens separately under `whiten_advantages`).
    Names:
        verl `gae` (`algorithm.gamma`, `algorithm.lam`); ROLL `adv_estimator: gae` (`gamma`, `lambd`);
        Trinity-RFT `advantage_fn: ppo`.
    Paper:
        Schulman et al. 2016, High-Dimensional Continuous Control Using Generalized Advantage
        Estimation, arXiv:1506.02438.
    Reads:
        token_level_rewards, response_mask, values, gamma (1.0), lam (1.0), gae_whiten (True).
    Deviation:
        padding positions are zero in both outputs (verl leaves whitened values / raw values there);
        valid positions are identical.
    """
    if values is None:
        raise ValueError("gae needs `values` from a critic; enable the critic or pick a critic-free estimator")
    rewards = token_level_rewards.float()
    vals = values.float()
    mask = response_mask.float()
    next_value = torch.zeros_like(rewards[:, 0])  # (B,)
    last_gae = torch.zeros_like(rewards[:, 0])  # (B,)
    adv_reversed = []
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - vals[:, t]
        gae_t = delta + gamma * lam * last_gae
        # a padded step carries the next valid token's value and advantage through unchanged
        next_value = vals[:, t] * mask[:, t] + (1 - mask[:, t]) * next_value
        last_gae = gae_t * mask[:, t] + (1 - mask[:, t]) * last_gae
        adv_reversed.append(last_gae)
    adv = torch.stack(adv_reversed[::-1], dim=1)  # (B, T)
    returns = (adv + vals) * mask
    if gae_whiten:
        adv = masked_whiten(adv, mask)
    return AdvantageOutput(adv * mask, returns)


def _discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float, skip_masked: bool) -> torch.Tensor:
    """Return-to-go G_t = r_t + gamma * G_{t+1}.

    With `skip_masked` (verl REINFORCE++) a masked step (padding, or a tool observation inside a
    multi-turn response) neither adds its reward nor discounts: the running return passes through it
    unchanged and its own return is 0. Without it (ROLL) every step discounts, reward pre-masked.
    """
    returns = torch.zeros_like(rewards)  # (B, T)
    running = torch.zeros_like(rewards[:, 0])  # (B,)
    for t in reversed(range(rewards.shape[1])):
        step = rewards[:, t] + gamma * running
        if skip_masked:
            returns[:, t] = step * mask[:, t]
            running = step * mask[:, t] + running * (1 - mask[:, t])
        else:
            returns[:, t] = step
            running = step
    return returns


@register_advantage_estimator("reinforce_plus_plus", aliases=("reinforceplusplus",))
@torch.no_grad()
def reinforce_plus_plus_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0, **_: Any
) -> AdvantageOutput:
    """REINFORCE++: discounted return-to-go, whitened over all valid tokens of the batch.

    Formula:
        G_t = r_t + gamma * G_{t+1} over valid tokens only (a masked step passes G through unchanged,
        as verl >= 0.9 does for multi-turn observation tokens; G is 0 on masked steps);
        A = whiten(G) * m with the batch's masked mean and unbiased variance; returns = G.
    Names:
        verl `reinforce_plus_plus`; Trinity-RFT `reinforceplusplus`; not in ROLL.
    Paper:
        Hu 2025, REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models,
        arXiv:2501.03262.
    Reads:
        token_level_rewards, response_mask, gamma (1.0).
    """
    mask = response_mask.float()
    returns = _discounted_returns(token_level_rewards.float(), mask, gamma, skip_masked=True)
    adv = masked_whiten(returns, mask) * mask
    return AdvantageOutput(adv, returns)


@register_advantage_estimator("remax", needs=EstimatorNeeds(greedy_baseline=True))
@torch.no_grad()
def remax_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    reward_baselines: torch.Tensor | None = None,
    **_: Any,
) -> AdvantageOutput:
    """ReMax: undiscounted return-to-go minus the reward of the greedy response to the same prompt.

    Formula:
        G_t = sum_{k >= t} r_k m_k;  A_t = G_t - b * m_t, with b the greedy-decoded response's score.
    Names:
        verl `remax` (the trainer generates the greedy baseline); Trinity-RFT `remax`; not in ROLL.
        Registered with `needs=EstimatorNeeds(greedy_baseline=True)`: each RL step then decodes one greedy response
        per prompt with the current policy and passes its score (the raw reward-function score, before
        any reward shaping, as verl does) repeated over the prompt's `n` samples.
    Paper:
        Li et al. 2024, ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for
        Aligning Large Language Models, arXiv:2310.10505.
    Reads:
        token_level_rewards, response_mask, reward_baselines (B,).
    """
    if reward_baselines is None:
        raise ValueError("remax needs `reward_baselines`: the score of a greedy response for each prompt")
    mask = response_mask.float()
    returns = (token_level_rewards.float() * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])  # (B, T)
    adv = returns - reward_baselines.float().reshape(-1, 1) * mask
    return AdvantageOutput(adv, returns)


@register_advantage_estimator("reinforce")
@torch.no_grad()
def reinforce_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    reinforce_mode: str = "return",
    **_: Any,
) -> AdvantageOutput:
    """REINFORCE without a baseline: the advantage is the (discounted) return itself.

    Formula:
        `reinforce_mode="return"` (ROLL, default): A_t = G_t = sum_{k >= t} gamma^(k-t) r_k m_k, times m_t.
        `reinforce_mode="outcome"` (Trinity-RFT): A_t = s * m_t with s = sum_t r_t. The two agree when
        gamma = 1 and the only reward sits on the last valid token.
    Names:
        ROLL `adv_estimator: reinforce`; Trinity-RFT `advantage_fn: reinforce`; not in verl.
    Paper:
        Williams 1992, Simple Statistical Gradient-Following Algorithms for Connectionist
        Reinforcement Learning, Machine Learning 8:229-256.
    Reads:
        token_level_rewards, response_mask, gamma (1.0), reinforce_mode ("return").
    """
    mask = response_mask.float()
    rewards = token_level_rewards.float() * mask
    if reinforce_mode == "return":
        returns = _discounted_returns(rewards, mask, gamma, skip_masked=False) * mask
    elif reinforce_mode == "outcome":
        returns = rewards.sum(dim=-1, keepdim=True) * mask
    else:
        raise ValueError(f"reinforce_mode must be 'return' or 'outcome', got {reinforce_mode!r}")
    return AdvantageOutput(returns, returns.clone())
