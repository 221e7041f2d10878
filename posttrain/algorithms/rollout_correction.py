"""Rollout importance sampling: correcting for the gap between the sampler's and the trainer's
probabilities of the same tokens (a bf16 rollout engine against an fp32 or autocast actor).

The engine samples from pi_rollout; the PPO ratio is taken against pi_old, the actor's recomputation
with the same weights. Where they differ, the gradient is biased; weighting each token by
pi_old / pi_rollout (truncated: TIS) removes most of it, and rejecting tokens or sequences whose
ratio is far out (masked: MIS, and a veto on catastrophic tokens) removes the rest of the damage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posttrain.algorithms.masked import masked_mean

LEVELS = ("token", "sequence", "geometric")
MODES = ("truncate", "mask")
# exp(+-20) bounds every weight before any threshold, so a sequence-level product cannot overflow.
SAFETY_BOUND = 20.0


@dataclass(frozen=True)
class RolloutCorrection:
    """What `rollout_importance_weights` returns."""

    weights: torch.Tensor  # (B, T) float32: the loss weight of each token, 0 on padding
    keep: torch.Tensor  # (B, T) float32: response_mask with the rejected tokens set to 0
    metrics: dict[str, float]


@torch.no_grad()
def rollout_importance_weights(
    old_logprob: torch.Tensor,
    rollout_logprob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    threshold: float,
    threshold_lower: float | None = None,
    level: str = "token",
    mode: str = "truncate",
    veto_threshold: float | None = None,
) -> RolloutCorrection:
    """Importance weights pi_old / pi_rollout of the sampled tokens, and which tokens to reject.

    Formula:
        d_t = log pi_old(y_t) - log pi_rollout(y_t) on real tokens (m_t = 1), 0 on padding.
        token:     w_t = exp(clamp(d_t, -20, 20)), one weight per token;
        sequence:  w_t = exp(clamp(sum_t m_t d_t, -20, 20)) for every token of the sequence;
        geometric: w_t = exp(clamp(sum_t m_t d_t / sum_t m_t, -20, 20)) for every token.
        U = threshold, L = threshold_lower (default 1 / U).
        mode truncate: weights = min(w, U) m; nothing rejected.
        mode mask:     weights = w m; tokens (token level) or whole sequences (other levels) with
                       w outside [L, U] are rejected: keep = 0 there.
        veto (any level and mode): a sequence with a real token whose unclamped ratio exp(d_t) is
                       below veto_threshold is rejected whole.
        Weights are not changed by rejection; rejected tokens leave the loss through `keep`, which
        replaces the mask the losses and their normalisers count, as in verl.
    Metrics (prefix rollout_is/): mean, std (population, over real tokens) and min/max of the
        weights used; fraction_high / fraction_low: share of ratios (per token, or per sequence at
        the other levels) above U / below L before truncation; eff_sample_size: 1 / mean(v^2) with
        v = weights / mean(weights) over real tokens (1.0 = no loss of samples); veto_fraction: share
        of sequences vetoed; masked_fraction: share of real tokens rejected; mismatch_kl: mean of
        log pi_rollout - log pi_old over real tokens (k1 estimate of KL(pi_rollout || pi_old), the
        tokens being samples of pi_rollout).
    Names:
        verl `algorithm.rollout_is_threshold`, `rollout_is_threshold_lower`, `rollout_is_level`,
        `rollout_is_mode`, `rollout_is_veto_threshold` (its 2025-10-27 semantics: rejection through
        the response mask, weights only safety-bounded in mask mode).
    Paper:
        Yao et al. 2025, Your Efficient RL Framework Secretly Brings You Off-Policy RL Training
        (truncated importance sampling, TIS); Liu, Li et al. 2025, When Speed Kills Stability:
        Demystifying RL Collapse from the Inference-Training Mismatch (sequence/geometric levels,
        masked IS, veto).
    """
    if level not in LEVELS:
        raise ValueError(f"rollout IS level must be one of {LEVELS}, got {level!r}")
    if mode not in MODES:
        raise ValueError(f"rollout IS mode must be one of {MODES}, got {mode!r}")
    upper = float(threshold)
    lower = 1.0 / upper if threshold_lower is None else float(threshold_lower)
    if not 0.0 < lower <= upper:
        raise ValueError(f"rollout IS bounds need 0 < lower <= upper, got lower {lower}, upper {upper}")
    mask = response_mask.float()
    real = mask > 0
    diff = torch.where(real, old_logprob.float() - rollout_logprob.float(), 0.0)  # (B, T)
    if level == "token":
        log_w = diff.clamp(-SAFETY_BOUND, SAFETY_BOUND)  # (B, T)
        per_unit, unit_real = log_w, real  # thresholds are checked per token
    else:
        seq = diff.sum(-1)  # (B,)
        if level == "geometric":
            seq = seq / mask.sum(-1).clamp(min=1.0)
        seq = seq.clamp(-SAFETY_BOUND, SAFETY_BOUND)
        log_w = seq[:, None].expand_as(diff)  # (B, T)
        per_unit, unit_real = seq, real.any(-1)  # thresholds are checked per sequence
    ratio = torch.exp(log_w)  # (B, T), safety-bounded
    unit_ratio = torch.exp(per_unit)[unit_real]
    high = float((unit_ratio > upper).float().mean()) if unit_ratio.numel() else 0.0
    low = float((unit_ratio < lower).float().mean()) if unit_ratio.numel() else 0.0

    weights = (ratio.clamp(max=upper) if mode == "truncate" else ratio) * mask
    keep = mask.clone()
    if mode == "mask":
        keep = keep * ((ratio >= lower) & (ratio <= upper)).float()
    vetoed = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)
    if veto_threshold is not None:
        vetoed = (real & (diff < math.log(veto_threshold))).any(-1)  # (B,): unclamped ratio below the veto
        keep = keep * (~vetoed).float()[:, None]

    n_real = mask.sum()
    used = weights[real]
    mean = masked_mean(weights, mask)
    metrics = {
        "rollout_is/mean": float(mean),
        "rollout_is/std": float(used.std(unbiased=False)) if used.numel() else 0.0,
        "rollout_is/min": float(used.min()) if used.numel() else 0.0,
        "rollout_is/max": float(used.max()) if used.numel() else 0.0,
        "rollout_is/fraction_high": high,
        "rollout_is/fraction_low": low,
        "rollout_is/eff_sample_size": float(1.0 / ((used / mean) ** 2).mean()) if used.numel() and mean > 0 else 0.0,
        "rollout_is/veto_fraction": float(vetoed[real.any(-1)].float().mean()) if bool(real.any()) else 0.0,
        "rollout_is/masked_fraction": float(1.0 - keep.sum() / n_real) if n_real > 0 else 0.0,
        "rollout_is/mismatch_kl": float(masked_mean(-diff, mask)),
    }
    return RolloutCorrection(weights, keep, metrics)
