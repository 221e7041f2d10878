"""REINFORCE-style policy losses with gates on the importance ratio: SAPO, sPPO, REC, plain importance sampling.

Same signature and conventions as `posttrain.algorithms.policy_losses` (keywords, float32 math,
gradients into `logprob` only, `loss_scale_factor` and `sample_weights` for the aggregation).
"""

from __future__ import annotations

import torch

from posttrain.algorithms.aggregation import aggregate_loss
from posttrain.algorithms.masked import masked_mean
from posttrain.algorithms.policy_losses import _f32, _metrics
from posttrain.algorithms.registry import LossOutput, register_policy_loss

REC_CLIP_MODES = ("none", "one-side", "two-side", "ring")
REC_WEIGHTS = ("none", "importance_sampling", "advantage")
REC_REGULARIZERS = ("none", "k2", "forward-kl")


@register_policy_loss("sapo")
def sapo_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """SAPO: a smooth sigmoid gate on the ratio in place of PPO's hard clip.

    Formula:
        r = exp(clamp(log pi - log pi_old, -20, 20)); tau = tau_pos where A > 0, else tau_neg;
        f(r) = 4 sigmoid(tau (r - 1)) / tau; L = -f(r) A, gradient through r (at r = 1 it equals
        the policy gradient; far from 1 it fades smoothly). pg_clipfrac = 0 (nothing is cut).
    Names:
        Trinity-RFT `policy_loss_fn: sapo` (`tau_pos`, `tau_neg`), the loss of `algorithm_type: sapo`;
        verl's `policy_loss.loss_mode: sapo` (the actor's `tau_pos`, `tau_neg`; verl aggregates it
        seq-mean-token-mean whatever loss_agg_mode says); not in ROLL.
    Paper:
        Soft Adaptive Policy Optimization (2025), arXiv:2511.20347.
    Deviation:
        the paper's objective, differentiated through the ratio. Trinity-RFT instead multiplies the
        gradient of log pi by the detached gate f(r), which scales the gradient by 2 / tau at r = 1.
    """
    if tau_neg < tau_pos:
        raise ValueError(f"sapo needs tau_neg >= tau_pos (negative samples are damped harder), got {tau_neg} < {tau_pos}")
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    log_ratio = torch.clamp(logp - old, min=-20.0, max=20.0)  # clamp before exp: one bad token cannot overflow
    ratio = torch.exp(log_ratio)
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = aggregate_loss(-gate * adv, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    return LossOutput(loss, _metrics(0.0, masked_mean(-log_ratio, mask), 0.0))


@register_policy_loss("sppo")
def sppo_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    epsilon: float = 0.3,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """sPPO: the log-ratio times the advantage, on tokens whose ratio is inside a multiplicative band.

    Formula:
        r = exp(log pi - log pi_old) (detached); in = [1 / (1 + eps) <= r <= 1 + eps];
        L = -A (log pi - log pi_old) in. pg_clipfrac = share of tokens outside the band.
    Names:
        Trinity-RFT `policy_loss_fn: sppo` (`epsilon`), the loss of `algorithm_type: sppo`; not in
        verl or ROLL.
    Paper:
        Vaswani et al. 2022, A Functional Mirror Ascent View of Policy Gradient Methods with Function
        Approximation, arXiv:2108.05828 (sPPO: the softmax policy's mirror-ascent surrogate).
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    log_ratio = logp - old
    ratio = torch.exp(torch.clamp(log_ratio.detach(), min=-20.0, max=20.0))
    inside = ((ratio >= 1.0 / (1.0 + epsilon)) & (ratio <= 1.0 + epsilon)).float()
    loss = aggregate_loss(-adv * log_ratio * inside, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    return LossOutput(loss, _metrics(masked_mean(1.0 - inside, mask), masked_mean(-log_ratio.detach(), mask), 0.0))


def _rec_inside(ratio: torch.Tensor, adv: torch.Tensor, mode: str, low: float, high: float, low2: float, high2: float) -> torch.Tensor:
    """REC's token filter (bool (B, T)): which tokens keep their gradient."""
    band = (ratio >= 1.0 - low) & (ratio <= 1.0 + high)
    if mode == "none":
        return torch.ones_like(ratio, dtype=torch.bool)
    if mode == "two-side":
        return band
    if mode == "one-side":  # only the side the advantage pushes toward is bounded
        return ((adv >= 0) & (ratio <= 1.0 + high)) | ((adv <= 0) & (ratio >= 1.0 - low))
    if mode == "ring":  # the band, plus tokens far on the side the advantage pushes away from
        return band | ((adv >= 0) & (ratio <= 1.0 - low2)) | ((adv <= 0) & (ratio >= 1.0 + high2))
    raise ValueError(f"rec clip_mode must be one of {', '.join(REC_CLIP_MODES)}, got {mode!r}")


@register_policy_loss("rec")
def rec_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    epsilon_low_prime: float = 0.6,
    epsilon_high_prime: float = 2.0,
    clip_mode: str = "none",
    weight: str = "none",
    regularizer: str = "none",
    regularizer_coef: float = 0.0,
    temp: float = 1.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """REC: REINFORCE with a token filter on the ratio, an optional weight and an optional regulariser.

    Formula:
        r = exp(log pi - log pi_old) (detached); keep = the `clip_mode` filter: none (all),
        two-side (1 - eps_low <= r <= 1 + eps_high), one-side (r <= 1 + eps_high where A >= 0,
        r >= 1 - eps_low where A <= 0), ring (two-side, or r <= 1 - eps_low' where A >= 0, or
        r >= 1 + eps_high' where A <= 0). A' = A (weight none), A r (importance_sampling) or
        A exp(A / temp) (advantage). L = -A' log pi keep, plus c (log pi - log pi_old)^2 (k2) or
        minus c log pi (forward-kl), c = regularizer_coef. pg_clipfrac = share of tokens not kept.
    Names:
        Trinity-RFT `policy_loss_fn: rec` (the same option names), the loss of `algorithm_type: rec`;
        not in verl or ROLL.
    Paper:
        Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm (2025), arXiv:2509.24203.
    Deviation:
        Trinity-RFT's gspo-style variants (`clip_mode: gspo-one-side`, `weight:
        gspo_importance_sampling`) are not provided; the loss honours `loss_agg_mode` (Trinity-RFT
        always takes the token mean).
    """
    for name, value, allowed in (("weight", weight, REC_WEIGHTS), ("regularizer", regularizer, REC_REGULARIZERS)):
        if value not in allowed:
            raise ValueError(f"rec {name} must be one of {', '.join(allowed)}, got {value!r}")
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    log_ratio = logp - old
    ratio = torch.exp(torch.clamp(log_ratio.detach(), min=-20.0, max=20.0))
    keep = _rec_inside(ratio, adv, clip_mode, epsilon_low, epsilon_high, epsilon_low_prime, epsilon_high_prime).float()
    if weight == "importance_sampling":
        adv = adv * ratio
    elif weight == "advantage":
        adv = adv * torch.exp(adv / temp)
    losses = -adv * logp * keep
    if regularizer == "k2":
        losses = losses + regularizer_coef * log_ratio.square()
    elif regularizer == "forward-kl":
        losses = losses - regularizer_coef * logp
    loss = aggregate_loss(losses, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    return LossOutput(loss, _metrics(masked_mean(1.0 - keep, mask), masked_mean(-log_ratio.detach(), mask), 0.0))


@register_policy_loss("importance_sampling")
def importance_sampling_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """Plain importance-sampled policy gradient, no clipping (for on-policy distillation).

    Formula:
        r = exp(clamp(log pi - log pi_old, -20, 20)); L = -A r. pg_clipfrac = 0.
    Names:
        Trinity-RFT `policy_loss_fn: importance_sampling` (the unclipped choice for `algorithm_type:
        on_policy_distill`); not in verl or ROLL.
    Paper:
        Agarwal et al. 2024, On-Policy Distillation of Language Models, arXiv:2306.13649 (the
        surrogate whose gradient at r = 1 is the policy gradient: Williams 1992).
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    log_ratio = torch.clamp(logp - old, min=-20.0, max=20.0)
    loss = aggregate_loss(-adv * torch.exp(log_ratio), mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    return LossOutput(loss, _metrics(0.0, masked_mean(-log_ratio.detach(), mask), 0.0))


@register_policy_loss("topr_pg")
def topr_pg_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    scores: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    positive_coef: float = 1.0,
    negative_coef: float = 1.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """TOPR as ROLL's policy-gradient workers compute it: both parts in one aggregate.

    Formula:
        negative = score <= 0 (per response); alpha = sg[clip(pi / pi_old, 0, 1)];
        l_t = positive_coef * (-A log pi) on positive responses, negative_coef * (-alpha A log pi)
        on negative ones; L = agg(l) over every token. (`topr_roll`, ROLL's use_topr_loss, instead
        aggregates the two parts apart and adds them; with token-sum the two agree.)
    Names:
        ROLL `actor_train.pg_variant: topr` of `worker_cls` ActorPGWorker (RLVR) or the agentic
        PG ActorWorker (`topr_positive_weight`, `topr_negative_weight`); not in verl or Trinity-RFT.
    Paper:
        Le Roux et al. 2025, Tapered Off-Policy REINFORCE, arXiv:2503.14286.
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    negative = (scores.to(mask.device).float().reshape(-1, 1) <= 0).expand_as(mask)  # (B, T)
    ratio = torch.exp(torch.clamp(logp.detach() - old, min=-20.0, max=20.0))
    alpha = torch.where(negative, torch.clamp(ratio, 0.0, 1.0), torch.ones_like(ratio))  # 1 on positives
    coef = torch.where(negative, torch.full_like(ratio, negative_coef), torch.full_like(ratio, positive_coef))
    loss = aggregate_loss(-coef * alpha * adv * logp, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    clipfrac = masked_mean((alpha < 1.0).float(), mask)
    return LossOutput(loss, _metrics(clipfrac, masked_mean(old - logp.detach(), mask), 0.0))
