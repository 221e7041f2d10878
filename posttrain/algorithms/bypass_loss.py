"""verl's bypass mode: the rollout's own log-probs are the old ones (no recomputation by the actor),
and the correction for the gap between sampler and learner is taken inside the loss, against the
current policy, on every micro-batch."""

from __future__ import annotations

import torch

from posttrain.algorithms.aggregation import aggregate_loss
from posttrain.algorithms.masked import masked_mean
from posttrain.algorithms.policy_losses import ppo_clip_loss
from posttrain.algorithms.registry import LossOutput, register_policy_loss
from posttrain.algorithms.rollout_correction import is_threshold_spec, rollout_importance_weights, rollout_rejection

LOSS_TYPES = ("ppo_clip", "reinforce")


@register_policy_loss("bypass_mode")
def bypass_mode_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_type: str = "ppo_clip",
    rollout_is: str | None = None,
    rollout_is_threshold: float | str = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """Bypass-mode policy loss: old_logprob is the rollout's log pi_rollout.

    Formula:
        With the current log pi (detached) against log pi_rollout: w = the rollout importance
        weights at level rollout_is (token or sequence; truncated at rollout_is_threshold U, or,
        given as "L_U", zeroed outside [L, U] (IcePop, mode zero); then rescaled to mean 1 with
        rollout_is_batch_normalize: posttrain.algorithms.rollout_importance_weights),
        keep = the tokens rollout_rs passes (posttrain.algorithms.rollout_rejection; all when null),
        m' = m keep.
        loss_type reinforce:  L_t = -A_t w_t log pi(y_t) (w = 1 when rollout_is is null),
                              aggregated over m'; ppo_kl = masked mean of log pi_rollout - log pi.
        loss_type ppo_clip:   PPO's clipped surrogate (vanilla) with ratio pi / pi_rollout over m';
                              w is not applied (the ratio already carries it) and only logged.
    Names:
        verl `algorithm.rollout_correction.bypass_mode: true` with `loss_type`, `rollout_is`,
        `rollout_is_threshold`, `rollout_is_batch_normalize`, `rollout_rs`, `rollout_rs_threshold`
        (verl computes the weights and the rejection per micro-batch, as here).
    Paper:
        Liu, Li et al. 2025, When Speed Kills Stability: Demystifying RL Collapse from the
        Inference-Training Mismatch (bypass mode, the two-policy formulation).
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"bypass_mode loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    metrics: dict[str, float] = {}
    weights = None
    current = logprob.detach()
    if rollout_is is not None:
        upper, lower = is_threshold_spec(rollout_is_threshold)
        out = rollout_importance_weights(
            current, old_logprob, response_mask, threshold=upper, threshold_lower=lower, level=rollout_is,
            mode="truncate" if lower is None else "zero", batch_normalize=rollout_is_batch_normalize,
        )
        weights = out.weights
        metrics.update({k.removeprefix("rollout_is/"): v for k, v in out.metrics.items() if k in ("rollout_is/mean", "rollout_is/batch_norm_factor")})
    mask = response_mask.float()
    if rollout_rs is not None:
        keep, rs_metrics = rollout_rejection(current, old_logprob, response_mask, options=rollout_rs, threshold=rollout_rs_threshold)
        mask = mask * keep
        metrics["rs_masked_fraction"] = rs_metrics["rollout_rs/masked_fraction"]
    if loss_type == "ppo_clip":
        out_loss = ppo_clip_loss(
            old_logprob=old_logprob, logprob=logprob, advantages=advantages, response_mask=mask, loss_agg_mode=loss_agg_mode,
            clip_ratio=clip_ratio, clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high, clip_ratio_c=clip_ratio_c,
            loss_scale_factor=loss_scale_factor, sample_weights=sample_weights,
        )
        return LossOutput(out_loss.loss, {**out_loss.metrics, **{f"is_{k}": v for k, v in metrics.items()}})
    logp, adv = logprob.float(), advantages.float()
    losses = -adv * logp * (weights if weights is not None else 1.0)  # (B, T): the weights are constants
    loss = aggregate_loss(losses, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    ppo_kl = masked_mean(old_logprob.float() - logp.detach(), mask)
    return LossOutput(loss, {"pg_clipfrac": 0.0, "ppo_kl": float(ppo_kl), "pg_clipfrac_lower": 0.0, **{f"is_{k}": v for k, v in metrics.items()}})
