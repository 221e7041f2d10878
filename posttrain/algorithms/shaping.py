"""Reward and advantage shaping from ROLL: clipping, normalisation, whitening, per-sample loss weights.

These run between scoring and the advantage estimator (rewards) or after it (advantages). Each is a
pure function; the running normaliser keeps its state in a `RunningMoments` the trainer owns and
checkpoints.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from posttrain.algorithms.groups import group_stats
from posttrain.algorithms.masked import masked_whiten
from posttrain.algorithms.running import RunningMoments

NORM_TYPES = (None, "batch", "group", "running")


class Clipped(NamedTuple):
    """Clipped values and the share of entries that were outside [-clip, clip]."""

    values: torch.Tensor
    clip_frac: float


def _clip(values: torch.Tensor, clip: float) -> Clipped:
    if clip <= 0:
        raise ValueError(f"clip bound must be > 0, got {clip}")
    v = values.float()
    frac = float(((v > clip) | (v < -clip)).float().mean()) if v.numel() else 0.0
    return Clipped(torch.clamp(v, -clip, clip), frac)


def clip_rewards(rewards: torch.Tensor, clip: float) -> Clipped:
    """Clamp rewards to [-clip, clip] so one extreme reward cannot dominate a batch.

    Formula:
        r <- clamp(r, -clip, clip); clip_frac = share of entries (all of them, as ROLL counts) outside.
    Names:
        ROLL `reward_clip`; verl has none; Trinity-RFT has none.
    Paper:
        Common PPO practice (Engstrom et al. 2020, Implementation Matters in Deep Policy Gradients,
        arXiv:2005.12729).
    """
    return _clip(rewards, clip)


def clip_advantages(advantages: torch.Tensor, clip: float) -> Clipped:
    """Clamp advantages to [-clip, clip] after estimation and whitening.

    Formula:
        A <- clamp(A, -clip, clip).
    Names:
        ROLL `advantage_clip`.
    Paper:
        Engstrom et al. 2020, Implementation Matters in Deep Policy Gradients, arXiv:2005.12729.
    """
    return _clip(advantages, clip)


def whiten(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Whiten over the batch's valid tokens and zero the padding; skipped when fewer than 2 are valid.

    Formula:
        x <- (x - mu) / sqrt(var + 1e-8) * m, with masked mean mu and unbiased masked variance var.
    Names:
        ROLL `whiten_rewards` (before the estimator) and `whiten_advantages` (after it).
    Paper:
        Standard PPO advantage normalisation (Schulman et al. 2017, arXiv:1707.06347).
    """
    mask = response_mask.float()
    return masked_whiten(values.float(), mask) * mask


@torch.no_grad()
def normalize_rewards(
    scores: torch.Tensor,
    mean_type: str | None = "group",
    std_type: str | None = "group",
    *,
    group_index: Any = None,
    running: RunningMoments | None = None,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """Normalise response-level scores (B,) by batch, group or running statistics.

    Formula:
        r <- (r - mu) / (sigma + epsilon), or r - mu when std_type is None; mu is 0 when mean_type is None.
        batch: mean and unbiased std of the whole batch; group: of the response's group (group_index;
        a group of one has mean 0, std 1); running: `running` is updated with this batch first, then
        its mean/std are used (ROLL's order).
    Names:
        ROLL `norm_mean_type`, `norm_std_type` (and `reward_norm`, `reward_shift` = mean only,
        `reward_scale` = std only); verl and Trinity-RFT normalise only inside their estimators.
    Paper:
        GRPO's group normalisation: Shao et al. 2024, arXiv:2402.03300.
    """
    for name, kind in (("mean_type", mean_type), ("std_type", std_type)):
        if kind not in NORM_TYPES:
            raise ValueError(f"{name} must be one of {NORM_TYPES}, got {kind!r}")
    s = scores.detach().to(torch.float64).reshape(-1)
    if "running" in (mean_type, std_type):
        if running is None:
            raise ValueError("running normalisation needs a RunningMoments passed as `running`")
        running.update(s)
    stats = group_stats(s, group_index) if "group" in (mean_type, std_type) else None

    def pick(kind: str | None, which: str) -> torch.Tensor | float:
        if kind == "batch":
            if which == "mean":
                return s.mean()
            return s.std() if s.numel() > 1 else torch.ones((), dtype=s.dtype)
        if kind == "group":
            return stats.mean if which == "mean" else stats.std
        if kind == "running":
            return running.mean if which == "mean" else running.std
        return 0.0

    centred = s - pick(mean_type, "mean")
    out = centred if std_type is None else centred / (pick(std_type, "std") + epsilon)
    return out.to(torch.float32).reshape(scores.shape)


@torch.no_grad()
def sample_loss_weights(
    response_mask: torch.Tensor, difficulty: torch.Tensor | None = None, length_weighting: bool = False
) -> torch.Tensor:
    """Per-sample loss weights (B,) that up-weight hard prompts and short responses, mean 1.

    Formula:
        w = 1;  difficulty d in [0, 1] (clamped): w *= 0.5 + 1.5 d;  length_weighting: with response
        lengths L, w *= 1.5 - (L - min L) / (max L - min L + 1e-8);  finally w *= B / sum(w).
        Pass the result as `sample_weights` to a policy loss.
    Names:
        ROLL `difficulty_loss_weight`, `length_loss_weight`.
    Paper:
        ROLL (Wang et al. 2025, Reinforcement Learning Optimization for Large-Scale Learning,
        arXiv:2506.06122).
    """
    batch = response_mask.shape[0]
    w = torch.ones(batch, dtype=torch.float32, device=response_mask.device)
    if difficulty is not None:
        w = w * (0.5 + 1.5 * torch.clamp(difficulty.float().reshape(-1), 0.0, 1.0))
    if length_weighting:
        lengths = response_mask.float().sum(dim=-1)
        w = w * (1.5 - (lengths - lengths.min()) / (lengths.max() - lengths.min() + 1e-8))
    if w.sum() > 0:
        w = w * (batch / (w.sum() + 1e-8))
    return w


def scores_to_token_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each response's score (B,) on its last valid token, giving token-level rewards (B, T).

    Formula:
        r_{i,t} = s_i if t is the last t with m_{i,t} = 1, else 0 (a fully masked row gets no reward).
    Names:
        verl reward managers (`token_level_scores`); ROLL `expand_to_token_level`.
    Paper:
        Outcome supervision as in Ouyang et al. 2022, arXiv:2203.02155.
    """
    mask = response_mask.float()
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(dim=-1).values  # (B,)
    rewards = torch.zeros_like(mask)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    rewards[rows, last[rows]] = scores.float().reshape(-1)[rows]
    return rewards


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer_len: int, penalty_factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment (B,): 0 up to max_length - buffer_len tokens, then a linear
    ramp down to -penalty_factor at max_length, added to each response's reward.

    Formula:
        p_i = min(-(L_i - (L_max - L_buf)) / L_buf * penalty_factor, 0) for response lengths L (B,).
    Names:
        verl `reward_model.overlong_buffer.{enable, len, penalty_factor}` (its DAPO reward manager's
        `overlong_buffer_cfg`, with `max_resp_len` the response budget).
    Paper:
        DAPO: Yu et al. 2025, arXiv:2503.14476, section 3.4 (soft overlong punishment).

    >>> overlong_penalty(torch.tensor([4, 6, 8]), 8, 4, 1.0).tolist()
    [-0.0, -0.5, -1.0]
    """
    exceed = lengths.float() - (max_length - buffer_len)  # (B,) tokens into the ramp (negative before it)
    return torch.clamp(-exceed / buffer_len * penalty_factor, max=0.0)
