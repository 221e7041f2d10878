"""DPPO: a trust region on the divergence between the new and old token probabilities, in place of PPO's ratio clip.

Same signature and conventions as `posttrain.algorithms.policy_losses` (keywords, float32 math,
gradients into `logprob` only, `loss_scale_factor` and `sample_weights` for the aggregation).
"""

from __future__ import annotations

import torch

from posttrain.algorithms.aggregation import aggregate_loss
from posttrain.algorithms.masked import masked_mean
from posttrain.algorithms.policy_losses import _clip_bounds, _f32, _metrics
from posttrain.algorithms.registry import LossOutput, register_policy_loss


def _dppo(old: torch.Tensor, logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, valid: torch.Tensor,
          clip_ratio_c: float | None, loss_agg_mode: str, loss_scale_factor: float | None,
          sample_weights: torch.Tensor | None) -> LossOutput:
    """The loss both variants share, given which tokens lie inside the trust region (`valid`)."""
    log_ratio = torch.clamp(logp - old, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    # truncated importance sampling instead of a dual clip (the paper's section 5.4)
    weight = (ratio if clip_ratio_c is None else torch.clamp(ratio, max=clip_ratio_c)).detach()
    valid = valid.detach().float()
    losses = -adv * weight * logp * valid
    loss = aggregate_loss(losses, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    clipfrac = masked_mean(1.0 - valid, mask)
    truncated = (ratio > clip_ratio_c).float() * valid if clip_ratio_c is not None else torch.zeros_like(valid)
    return LossOutput(loss, _metrics(clipfrac, masked_mean(-log_ratio, mask), masked_mean(truncated, mask)))


@register_policy_loss("dppo_tv")
def dppo_tv_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """DPPO-Binary-TV: REINFORCE weighted by the truncated ratio, on the tokens whose probability moved
    less than a total-variation bound in the direction the advantage pushes.

    Formula:
        r = exp(clamp(log pi - log pi_old, -20, 20)); p = pi(token), q = pi_old(token);
        valid = (p - q <= delta_high) where A > 0, else (p - q >= -delta_low);
        L = -A sg[min(r, C)] log pi sg[valid], aggregated by `loss_agg_mode` over every response
        token (a token outside the region adds 0 and still counts in the denominator).
        clip_ratio / clip_ratio_low / clip_ratio_high are the divergence bounds delta (not ratio
        bounds), clip_ratio_c is C (None: no truncation). pg_clipfrac = share of tokens outside the
        region; pg_clipfrac_lower = share inside it whose ratio exceeded C.
    Names:
        verl `policy_loss.loss_mode=dppo_tv`; not in ROLL or Trinity-RFT.
    Paper:
        Rethinking the Trust Region in LLM Reinforcement Learning, arXiv:2602.04879 (DPPO).
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    moved = torch.exp(logp) - torch.exp(old)  # the total variation of the token's two-outcome distribution
    valid = torch.where(adv > 0, moved <= high, moved >= -low)
    return _dppo(old, logp, adv, mask, valid, clip_ratio_c, loss_agg_mode, loss_scale_factor, sample_weights)


@register_policy_loss("dppo_kl")
def dppo_kl_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """DPPO-Binary-KL: as dppo_tv, with the trust region a bound on the KL divergence between the old
    and new two-outcome distributions (the token, or any other token).

    Formula:
        p = pi(token), q = pi_old(token);
        D = q (log q - log p) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8));
        valid = (D <= delta_high or p <= q) where A > 0, else (D <= delta_low or p >= q)
        (a move against the advantage's push is never cut); L = -A sg[min(r, C)] log pi sg[valid],
        as dppo_tv.
    Names:
        verl `policy_loss.loss_mode=dppo_kl`; not in ROLL or Trinity-RFT.
    Paper:
        Rethinking the Trust Region in LLM Reinforcement Learning, arXiv:2602.04879 (DPPO).
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    p, q = torch.exp(logp), torch.exp(old)
    # the 1e-8 keeps log finite where a probability is 1 (verl's constant)
    binary_kl = q * (old - logp) + (1.0 - q) * torch.log((1.0 - q + 1e-8) / (1.0 - p + 1e-8))
    valid = torch.where(adv > 0, (binary_kl <= high) | (p <= q), (binary_kl <= low) | (p >= q))
    return _dppo(old, logp, adv, mask, valid, clip_ratio_c, loss_agg_mode, loss_scale_factor, sample_weights)
