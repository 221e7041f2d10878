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

from posttrain.algorithms.masked import masked_mean, masked_segment_mean

LEVELS = ("token", "sequence", "geometric", "segment")
MODES = ("truncate", "mask", "zero")
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
    batch_normalize: bool = False,
) -> RolloutCorrection:
    """Importance weights pi_old / pi_rollout of the sampled tokens, and which tokens to reject.

    Formula:
        d_t = log pi_old(y_t) - log pi_rollout(y_t) on real tokens (m_t = 1), 0 on padding.
        token:     w_t = exp(clamp(d_t, -20, 20)), one weight per token;
        sequence:  w_t = exp(clamp(sum_t m_t d_t, -20, 20)) for every token of the sequence;
        geometric: w_t = exp(clamp(sum_t m_t d_t / sum_t m_t, -20, 20)) for every token.
        segment:   w_t = exp(clamp(mean of d over t's segment, -20, 20)), a segment being a maximal
                   run of real tokens (one model turn of an agentic trajectory whose env tokens are
                   masked); thresholds, fractions and batch normalisation count it per token
                   (ROLL's `segment` weight_type and filter agg_type).
        U = threshold, L = threshold_lower (default 1 / U).
        mode truncate: weights = min(w, U) m; nothing rejected.
        mode mask:     weights = w m; tokens (token level), segments (segment level) or whole
                       sequences (other levels) with w outside [L, U] are rejected: keep = 0 there.
        mode zero:     weights = w m where L <= w <= U and 0 elsewhere; nothing rejected, so a
                       zeroed token still counts in the losses' normalisers but adds no gradient
                       (IcePop's M(k): k inside [L, U], else 0).
        veto (any level and mode): a sequence with a real token whose unclamped ratio exp(d_t) is
                       below veto_threshold is rejected whole.
        batch_normalize: weights /= their batch mean (over real tokens at the token level, over
                       sequences with a real token, one weight each, at the other levels), after
                       the truncation, unless that mean is <= 1e-8; the mean is reported as
                       rollout_is/batch_norm_factor and the other metrics describe the weights
                       before it (verl `rollout_correction.rollout_is_batch_normalize`).
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
        the response mask, weights only safety-bounded in mask mode); verl 0.10's
        `rollout_correction.rollout_is_threshold: "L_U"` is mode zero with those bounds.
    Paper:
        Yao et al. 2025, Your Efficient RL Framework Secretly Brings You Off-Policy RL Training
        (truncated importance sampling, TIS); Liu, Li et al. 2025, When Speed Kills Stability:
        Demystifying RL Collapse from the Inference-Training Mismatch (sequence/geometric levels,
        masked IS, veto); Ling Team 2025, Every Step Evolves: Scaling Reinforcement Learning for
        Trillion-Scale Thinking Model (Ring-1T: IcePop, mode zero).
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
    if level in ("token", "segment"):
        # a segment's tokens share its mean log-ratio; padding and env tokens stay 0 (weight 1, masked)
        log_w = (diff if level == "token" else masked_segment_mean(diff, mask)).clamp(-SAFETY_BOUND, SAFETY_BOUND)  # (B, T)
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

    inside = (ratio >= lower) & (ratio <= upper)  # (B, T)
    if mode == "truncate":
        weights = ratio.clamp(max=upper) * mask
    elif mode == "zero":
        weights = torch.where(inside, ratio, 0.0) * mask  # out-of-range tokens stay in the normalisers, with weight 0
    else:
        weights = ratio * mask
    keep = mask.clone()
    if mode == "mask":
        keep = keep * inside.float()
    vetoed = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)
    if veto_threshold is not None:
        vetoed = (real & (diff < math.log(veto_threshold))).any(-1)  # (B,): unclamped ratio below the veto
        keep = keep * (~vetoed).float()[:, None]

    n_real = mask.sum()
    used = weights[real]
    mean = masked_mean(weights, mask)
    norm: dict[str, float] = {}
    if batch_normalize:
        weights, norm = _batch_normalize(weights, mask, real, level)
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
        **norm,
    }
    return RolloutCorrection(weights, keep, metrics)


def is_threshold_spec(spec: str | float) -> tuple[float, float | None]:
    """``(upper, lower)`` from verl 0.10's rollout_is_threshold: one number U (truncation at U: lower
    None) or the string "L_U" (IcePop's bounds, for mode zero). ValueError says what is wrong."""
    if isinstance(spec, bool):
        raise ValueError(f"expected a number or 'L_U', got {spec!r}")
    text = str(spec).strip()
    lower_s, sep, upper_s = text.partition("_")
    try:
        upper, lower = (float(upper_s), float(lower_s)) if sep else (float(text), None)
    except ValueError:
        raise ValueError(f"expected a number U or 'L_U' (two numbers joined by '_'), got {spec!r}") from None
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError(f"{spec!r}: the bounds need 0 < L <= U")
    return upper, lower


def _batch_normalize(weights: torch.Tensor, mask: torch.Tensor, real: torch.Tensor, level: str) -> tuple[torch.Tensor, dict[str, float]]:
    """Weights rescaled to mean 1 over the batch's units (tokens, or sequences at a sequence level)."""
    if level in ("token", "segment"):
        mean = masked_mean(weights, mask)
    else:
        has_real = real.any(-1)  # (B,)
        per_seq = (weights * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,): the sequence's one weight
        mean = per_seq[has_real].mean() if bool(has_real.any()) else torch.zeros(())
    if float(mean) <= 1e-8:
        return weights, {"rollout_is/batch_norm_factor": 1.0}
    return weights / mean, {"rollout_is/batch_norm_factor": float(mean)}


# Rejection sampling: a divergence statistic of pi_old against pi_rollout per token, per segment
# (a run of real tokens: one model turn) or per sequence.
RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3",
    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
    "seq_max_k2", "seq_max_k3",
    "seg_mean_k1", "seg_mean_k2", "seg_mean_k3",
    "token_diff", "seq_sum_diff", "seq_mean_diff", "seg_mean_diff",
)


def rs_thresholds(options: str, threshold: str | float | None) -> dict[str, tuple[float | None, float]]:
    """``{option: (lower, upper)}`` from the comma-separated ``options`` and ``threshold`` (one value
    shared by every option, or one per option, comma-separated). A k1 option takes "L_U" ratio
    bounds, or one number U meaning L = 1/U; a diff option "L_U" bounds on the probability
    difference (L may be negative), or one number U meaning L = -U; the k2/k3 options take one
    upper bound. ValueError names what is wrong."""
    names = list(dict.fromkeys(o.strip() for o in options.split(",") if o.strip()))
    unknown = [o for o in names if o not in RS_OPTIONS]
    if not names or unknown:
        raise ValueError(f"unknown rejection option(s) {unknown or [options]}; valid: {', '.join(RS_OPTIONS)}")
    if threshold is None:
        raise ValueError("rejection sampling needs a threshold (rollout_rs_threshold)")
    specs = [str(threshold)] if isinstance(threshold, (int, float)) else [p.strip() for p in str(threshold).split(",") if p.strip()]
    if len(specs) == 1:
        specs = specs * len(names)
    if len(specs) != len(names):
        raise ValueError(f"{len(specs)} thresholds for {len(names)} rejection options; give one shared value or one per option")
    out: dict[str, tuple[float | None, float]] = {}
    for name, spec in zip(names, specs):
        try:
            if name.endswith(("k1", "diff")):
                lower_s, _, upper_s = spec.rpartition("_") if "_" in spec else ("", "", spec)
                upper = float(upper_s)
                lower = float(lower_s) if lower_s else (-upper if name.endswith("diff") else 1.0 / upper)
            elif "_" in spec:
                raise ValueError(f"{name} takes one upper bound, not the range {spec!r}")
            else:
                lower, upper = None, float(spec)
        except (ValueError, ZeroDivisionError) as err:
            raise ValueError(f"threshold {spec!r} of {name}: {err}") from None
        if name.endswith("diff"):
            if not lower <= upper:
                raise ValueError(f"threshold {spec!r} of {name} needs lower <= upper")
        elif upper <= 0 or (lower is not None and lower <= 0):
            raise ValueError(f"threshold {spec!r} of {name} must be positive")
        out[name] = (lower, upper)
    return out


@torch.no_grad()
def rollout_rejection(
    old_logprob: torch.Tensor,
    rollout_logprob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    options: str,
    threshold: str | float | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Tokens kept by divergence-based rejection sampling: ``(keep (B, T) float, metrics)``.

    Formula:
        r_t = clamp(log pi_old(y_t) - log pi_rollout(y_t), -20, 20) on real tokens (m_t = 1).
        Per-token divergences: k1 = -r_t, k2 = r_t^2 / 2, k3 = exp(r_t) - 1 - r_t, and the
        probability difference diff = pi_old(y_t) - pi_rollout(y_t) (unclamped; ROLL's diff).
        token_X keeps token t when its X passes; seq_sum_X, seq_mean_X and seq_max_X reduce the
        sequence's real tokens by sum, mean or max and keep or reject the whole sequence; seg_mean_X
        takes the mean over each segment (maximal run of real tokens: one model turn of an agentic
        trajectory, its env tokens masked) and keeps or rejects the whole segment.
        A k1 statistic passes when log L <= k <= log U (L, U: the option's ratio bounds; verl's
        convention, symmetric when L = 1/U); a k2/k3 statistic passes when k <= U; a diff
        statistic when L <= diff <= U.
        keep = m times the product over the options of their pass indicators (every option must pass).
    Metrics (prefix rollout_rs/): masked_fraction (share of real tokens rejected), seq_masked_fraction
        (share of sequences with a rejected real token), and per option <option>_masked_fraction.
    Names:
        verl `algorithm.rollout_correction.rollout_rs` / `rollout_rs_threshold`; the seg_mean and
        diff options are ROLL's `train_infer_correction.filters` at agg_type segment and with
        diff_enabled (roll/utils/train_infer_corrections.py).
    Paper:
        Liu, Li et al. 2025, When Speed Kills Stability: Demystifying RL Collapse from the
        Inference-Training Mismatch (rejection by k1/k2/k3 divergence bounds).
    """
    bounds = rs_thresholds(options, threshold)
    mask = response_mask.float()
    real = mask > 0
    r = torch.where(real, old_logprob.float() - rollout_logprob.float(), 0.0).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    probs = torch.where(real, old_logprob.float().exp() - rollout_logprob.float().exp(), 0.0)  # (B, T)
    per_token = {"k1": -r, "k2": 0.5 * r**2, "k3": torch.exp(r) - 1.0 - r, "diff": probs}  # (B, T) each
    n_tokens = mask.sum(-1).clamp(min=1.0)  # (B,)
    keep = mask.clone()
    metrics: dict[str, float] = {}
    n_real = float(mask.sum())
    for name, (lower, upper) in bounds.items():
        stat = per_token[name.rpartition("_")[2]]
        if name.startswith("seg_mean"):
            stat = masked_segment_mean(stat, mask)  # (B, T): each token carries its segment's mean
        elif name.startswith("seq_sum"):
            stat = (stat * mask).sum(-1, keepdim=True)
        elif name.startswith("seq_mean"):
            stat = ((stat * mask).sum(-1) / n_tokens)[:, None]
        elif name.startswith("seq_max"):
            stat = stat.masked_fill(~real, float("-inf")).max(-1, keepdim=True).values
            stat = torch.where(torch.isinf(stat), torch.zeros_like(stat), stat)
        if name.endswith("diff"):
            passed = (stat >= lower) & (stat <= upper)
        else:
            passed = stat <= upper if lower is None else (stat >= math.log(lower)) & (stat <= math.log(upper))
        passed = passed.expand_as(mask).float()
        keep = keep * passed
        metrics[f"rollout_rs/{name}_masked_fraction"] = float(((1 - passed) * mask).sum() / n_real) if n_real else 0.0
    seq_real = real.any(-1)
    rejected_seq = ((keep == 0) & real).any(-1)
    metrics["rollout_rs/masked_fraction"] = float(1.0 - keep.sum() / n_real) if n_real else 0.0
    metrics["rollout_rs/seq_masked_fraction"] = float(rejected_seq[seq_real].float().mean()) if bool(seq_real.any()) else 0.0
    return keep, metrics
