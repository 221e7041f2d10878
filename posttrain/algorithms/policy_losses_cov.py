"""Clip-Cov and KL-Cov: PPO variants that restrain the few tokens driving entropy collapse.

Cui et al. show the entropy change of a policy-gradient step tracks the covariance between a token's
log-prob and its advantage; a small fraction of tokens with very high covariance dominate it. Clip-Cov
drops the gradient of a random few of those tokens; KL-Cov adds a |log ratio| penalty to the top-k.
"""

from __future__ import annotations

import torch

from posttrain.algorithms.aggregation import aggregate_loss
from posttrain.algorithms.masked import masked_mean
from posttrain.algorithms.policy_losses import _clip_bounds, _f32, _metrics
from posttrain.algorithms.registry import LossOutput, register_policy_loss


def _centred_cov(adv: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token (A - mean A)(log pi - mean log pi), means over valid tokens; shape (B, T), no gradient."""
    logp = logp.detach()
    return (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))


@register_policy_loss("clip_cov")
def clip_cov_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    generator: torch.Generator | None = None,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """Clip-Cov: PPO clip, plus zero gradient for a random few high-covariance tokens.

    Formula:
        L_t = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high)) * c_t (rho unclamped, as in verl);
        c_t = 0 for k = max(floor(clip_cov_ratio * N_valid), 1) tokens drawn uniformly among valid,
        not PPO-clipped tokens with clip_cov_lb < cov_t < clip_cov_ub, else 1. pg_clipfrac = share
        with c_t = 0. Pass `generator` for a reproducible draw.
    Names:
        verl `loss_mode=clip_cov` (`policy_loss.clip_cov_ratio`, `clip_cov_lb`, `clip_cov_ub`); not in
        ROLL or Trinity-RFT.
    Paper:
        Cui et al. 2025, The Entropy Mechanism of Reinforcement Learning for Reasoning Language
        Models, arXiv:2505.22617.
    """
    if clip_cov_ratio <= 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {clip_cov_ratio}")
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    eps_low, eps_high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = logp - old
    ratio = torch.exp(log_ratio)
    loss1 = -adv * ratio
    loss2 = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    valid = mask > 0
    cov = _centred_cov(adv, logp, mask)
    candidates = valid & ~(loss2 > loss1) & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    idx = torch.nonzero(candidates)  # (K, 2)
    keep = torch.ones_like(adv)
    if len(idx) > 0:
        k = max(int(clip_cov_ratio * int(valid.sum())), 1)
        chosen = idx[torch.randperm(len(idx), generator=generator)[: min(k, len(idx))].to(idx.device)]
        keep[chosen[:, 0], chosen[:, 1]] = 0.0
    losses = torch.maximum(loss1, loss2) * keep
    loss = aggregate_loss(losses, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    clipfrac = masked_mean((keep == 0).float(), mask)
    return LossOutput(loss, _metrics(clipfrac, masked_mean(-log_ratio, mask), 0.0))


@register_policy_loss("kl_cov")
def kl_cov_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 1.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """KL-Cov: unclipped policy gradient, plus a |log ratio| penalty on the top-k covariance tokens.

    Formula:
        L_t = -A rho, and for the k = max(floor(kl_cov_ratio * N_valid), 1) valid tokens with the
        largest cov_t: L_t = -A rho + ppo_kl_coef |log pi - log pi_old|. ppo_kl reports the masked
        mean of |log ratio| (as verl does).
    Names:
        verl `loss_mode=kl_cov` (`policy_loss.kl_cov_ratio`, `ppo_kl_coef`); not in ROLL or Trinity-RFT.
    Paper:
        Cui et al. 2025, The Entropy Mechanism of Reinforcement Learning for Reasoning Language
        Models, arXiv:2505.22617.
    """
    if kl_cov_ratio <= 0:
        raise ValueError(f"kl_cov_ratio must be > 0, got {kl_cov_ratio}")
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    log_ratio = logp - old
    ratio = torch.exp(log_ratio)
    losses = -adv * ratio
    valid = mask > 0
    penalise = torch.zeros_like(valid)
    n_valid = int(valid.sum())
    if n_valid > 0:
        adv_v, logp_v = adv.detach()[valid], logp.detach()[valid]  # (N,)
        cov = (adv_v - adv_v.mean()) * (logp_v - logp_v.mean())
        top = torch.topk(cov, max(1, int(n_valid * kl_cov_ratio))).indices
        flat = torch.nonzero(valid.reshape(-1)).squeeze(-1)[top]
        penalise.view(-1)[flat] = True
    losses = torch.where(penalise, losses + ppo_kl_coef * log_ratio.abs(), losses)
    loss = aggregate_loss(losses, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    return LossOutput(loss, _metrics(0.0, masked_mean(log_ratio.abs(), mask), 0.0))
