"""Policy-gradient losses over per-token log-probs: PPO clip (vanilla), GSPO, CISPO, GPG, TOPR, OPMD.

Every loss takes `old_logprob, logprob, advantages, response_mask, loss_agg_mode` as keywords, plus
its own options declared explicitly (the trainer passes only the options configured for that loss),
plus two aggregation options all share: `loss_scale_factor` (the seq-mean-token-sum-norm normaliser)
and `sample_weights`: (B,) per sample (ROLL's length/difficulty weights) or (B, T) per token (rollout
importance weights, `posttrain.algorithms.rollout_correction`), multiplied into the per-token loss. Gradients flow into
`logprob` only; `old_logprob` and `advantages` are treated as constants. Math runs in float32 even
for bf16 inputs.
"""

from __future__ import annotations

import torch

from posttrain.algorithms.aggregation import aggregate_loss
from posttrain.algorithms.masked import masked_mean
from posttrain.algorithms.registry import LossOutput, register_policy_loss


def _f32(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.float() for t in tensors]


def _clip_bounds(clip_ratio: float, clip_ratio_low: float | None, clip_ratio_high: float | None) -> tuple[float, float]:
    low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    return float(low), float(high)


Scalar = torch.Tensor | float


def _metrics(clipfrac: Scalar, ppo_kl: Scalar, lower: Scalar) -> dict[str, float]:
    """The three metrics every loss reports, as floats (detached: logging must not hold the graph)."""

    def value(x: Scalar) -> float:
        return float(x.detach()) if isinstance(x, torch.Tensor) else float(x)

    return {"pg_clipfrac": value(clipfrac), "ppo_kl": value(ppo_kl), "pg_clipfrac_lower": value(lower)}


@register_policy_loss("vanilla", aliases=("ppo",))
def ppo_clip_loss(
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
    """PPO's clipped surrogate with asymmetric clip bounds (DAPO clip-higher) and dual clip.

    Formula:
        rho = exp(clamp(log pi - log pi_old, -20, 20));  L1 = -A rho;  L2 = -A clip(rho, 1 - eps_low, 1 + eps_high);
        L = max(L1, L2); for A < 0 the dual clip bounds it: L = min(L, -A c) (c = clip_ratio_c > 1;
        None disables it). pg_clipfrac = share of tokens with L2 > L1; pg_clipfrac_lower = share where
        the dual clip binds; ppo_kl = masked mean of log pi_old - log pi.
    Names:
        verl `actor.policy_loss.loss_mode=vanilla`, `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`,
        `clip_ratio_c`; ROLL `pg_clip`, `pg_clip_low`/`pg_clip_high` (`use_pg_clip_range`),
        `dual_clip_loss` (ROLL's dual clip is c = 1 + 2 * pg_clip); Trinity-RFT `policy_loss_fn: ppo`.
    Paper:
        Schulman et al. 2017, Proximal Policy Optimization Algorithms, arXiv:1707.06347. Dual clip:
        Ye et al. 2020, arXiv:1912.09729. Clip-higher: Yu et al. 2025, DAPO, arXiv:2503.14476.
    """
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c (dual-clip bound) must be > 1.0, got {clip_ratio_c}")
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    eps_low, eps_high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = torch.clamp(logp - old, min=-20.0, max=20.0)  # clamp before exp: one bad token cannot overflow
    ratio = torch.exp(log_ratio)
    loss1 = -adv * ratio
    loss2 = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    clipped = torch.maximum(loss1, loss2)
    clipfrac = masked_mean(torch.gt(loss2, loss1).float(), mask)
    if clip_ratio_c is None:
        losses, lower = clipped, torch.zeros(())
    else:
        loss3 = -adv * clip_ratio_c
        losses = torch.where(adv < 0, torch.minimum(loss3, clipped), clipped)
        lower = masked_mean((torch.gt(clipped, loss3) & (adv < 0)).float(), mask)
    loss = aggregate_loss(losses, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    return LossOutput(loss, _metrics(clipfrac, masked_mean(-log_ratio, mask), lower))


@register_policy_loss("gspo")
def gspo_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    dual_clip_c: float | None = None,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """GSPO: PPO clipping on a sequence-level ratio, the geometric mean of the token ratios.

    Formula:
        log s_i = (1/|y_i|) sum_t m_it (log pi - log pi_old);  s_it = exp(sg[log s_i] + log pi_t - sg[log pi_t])
        (value s_i, gradient of a token ratio), log s_it clamped at 10;
        L = max(-A s_it, -A clip(s_it, 1 - eps_low, 1 + eps_high)), aggregated by `loss_agg_mode`.
        Dual clip (`dual_clip_c` = c > 1; None, the default, disables it, as in the paper and verl):
        for A < 0, L = min(L, -A c), so a response whose sequence ratio s_i exceeds c stops pushing
        its tokens down; pg_clipfrac_lower = share of tokens where it binds.
    Names:
        verl `loss_mode=gspo` (recipe clip_ratio_low 3e-4, clip_ratio_high 4e-4); ROLL
        `importance_sampling: seq` (with `dual_clip_loss: true`, ROLL's actor applies its dual clip
        to the loss of the sequence ratio: `dual_clip_c` = 1 + 2 x pg_clip); Trinity-RFT
        `policy_loss_fn: gspo`.
    Paper:
        Zheng et al. 2025, Group Sequence Policy Optimization, arXiv:2507.18071.
    Deviation:
        the paper averages per sequence (`seq-mean-token-mean`, this function's default); like verl
        >= 0.9 we honour the configured `loss_agg_mode`, so set it to `seq-mean-token-mean` for GSPO.
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    eps_low, eps_high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = logp - old
    seq_log_ratio = (log_ratio * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)  # (B,)
    log_s = logp - logp.detach() + seq_log_ratio.detach().unsqueeze(-1)  # (B, T)
    s = torch.exp(torch.clamp(log_s, max=10.0))
    loss1 = -adv * s
    loss2 = -adv * torch.clamp(s, 1.0 - eps_low, 1.0 + eps_high)
    losses = torch.maximum(loss1, loss2)
    lower: Scalar = 0.0
    if dual_clip_c is not None:
        if dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c (dual-clip bound) must be > 1.0, got {dual_clip_c}")
        loss3 = -adv * dual_clip_c
        lower = masked_mean((torch.gt(losses, loss3) & (adv < 0)).float(), mask)
        losses = torch.where(adv < 0, torch.minimum(losses, loss3), losses)
    loss = aggregate_loss(losses, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    clipfrac = masked_mean(torch.gt(loss2, loss1).float(), mask)
    return LossOutput(loss, _metrics(clipfrac, masked_mean(-log_ratio, mask), lower))


@register_policy_loss("geo_mean", aliases=("gmpo",))
def gmpo_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """GMPO: the geometric mean of the clipped token ratios of a sequence times its advantage.

    Formula:
        d_t = log pi - log pi_old;  c_t = clamp(d_t, -eps_low, eps_high) (clipped in log space);
        s = sign(A_t);  d'_t = s min(s d_t, s c_t) (the pessimistic side for the advantage's sign);
        r_i = exp(sum_t m_it d'_t / (sum_t m_it + 1e-8));  A_i = sum_t m_it A_it / (sum_t m_it + 1e-8);
        L = mean_i(-A_i r_i w_i) over the micro-batch's sequences (so `actor.loss_agg_mode` other
        than token-mean is refused with this loss, and loss_scale_factor is not read).
        w_i: a (B,) sample weight, or the geometric mean over the sequence's real tokens of a (B, T)
        rollout importance weight (exp of the masked mean of log(w + 1e-10)); 1 without weights.
        pg_clipfrac / pg_clipfrac_lower: share of real tokens whose d_t was clipped with A > 0 / A < 0.
    Names:
        verl `actor.policy_loss.loss_mode=geo_mean` (clip_ratio_low / clip_ratio_high are the log-space
        bounds; its GMPO recipe uses 0.4 each).
    Paper:
        Zhao et al. 2025, Geometric-Mean Policy Optimization, arXiv:2507.20673.
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    eps_low, eps_high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = logp - old  # (B, T)
    clipped_log = torch.clamp(log_ratio, -eps_low, eps_high)
    sign = torch.sign(adv)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped_log)  # (B, T)
    n = mask.sum(-1) + 1e-8  # (B,)
    ratio = torch.exp((pessimistic * mask).sum(-1) / n)  # (B,): the geometric mean of the clipped ratios
    seq_adv = (adv * mask).sum(-1) / n  # (B,): GMPO takes one advantage per sequence
    losses = -seq_adv * ratio
    if sample_weights is not None:
        w = sample_weights.float()
        losses = losses * (torch.exp((torch.log(w + 1e-10) * mask).sum(-1) / n) if w.dim() == 2 else w)
    loss = losses.mean()  # a plain mean over sequences, as verl
    was_clipped = torch.ne(log_ratio, clipped_log)
    return LossOutput(loss, _metrics(
        masked_mean((was_clipped & (adv > 0)).float(), mask), masked_mean(-log_ratio, mask), masked_mean((was_clipped & (adv < 0)).float(), mask)
    ))


@register_policy_loss("cispo")
def cispo_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """CISPO: REINFORCE weighted by a clipped, stop-gradient importance ratio; no token loses its gradient.

    Formula:
        rho = exp(clamp(log pi - log pi_old, -20, 20));  L = -sg[clip(rho, 1 - eps_low, 1 + eps_high)] A log pi.
        pg_clipfrac = share of tokens whose ratio was clipped.
    Names:
        verl `loss_mode=cispo`; Trinity-RFT `policy_loss_fn: cispo`; not in ROLL.
    Paper:
        MiniMax 2025, MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention,
        arXiv:2506.13585.
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    eps_low, eps_high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = torch.clamp(logp - old, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high).detach()
    losses = -weight * adv * logp
    loss = aggregate_loss(losses, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    clipfrac = masked_mean((ratio.detach() != weight).float(), mask)
    return LossOutput(loss, _metrics(clipfrac, masked_mean(-log_ratio, mask), 0.0))


@register_policy_loss("gpg")
def gpg_loss(
    *,
    old_logprob: torch.Tensor | None,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """GPG: the plain policy gradient, no ratio and no clipping (pairs with the `gpg` estimator).

    Formula:
        L = -A log pi, aggregated by `loss_agg_mode`. Metrics are 0 except ppo_kl (when old_logprob given).
    Names:
        verl `loss_mode=gpg`; not in ROLL or Trinity-RFT.
    Paper:
        Chu et al. 2025, GPG: A Simple and Strong Reinforcement Learning Baseline for Model
        Reasoning, arXiv:2504.02546.
    """
    logp, adv, mask = _f32(logprob, advantages, response_mask)
    loss = aggregate_loss(-logp * adv, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    kl = 0.0 if old_logprob is None else masked_mean(old_logprob.float() - logp.detach(), mask)
    return LossOutput(loss, _metrics(0.0, kl, 0.0))


@register_policy_loss("topr")
def topr_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    advantage_threshold: float = 0.0,
    scores: torch.Tensor | None = None,
    positive_coef: float = 1.0,
    negative_coef: float = 1.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """TOPR: full REINFORCE on positive samples, truncated importance weight on negative ones.

    Formula:
        alpha = sg[clip(pi / pi_old, 0, 1)] on negative samples, 1 on positive ones; L = -alpha A log pi.
        Without `scores` (Trinity-RFT, default) a token is negative when A <= advantage_threshold and
        one aggregate is taken. With `scores` (B,) (ROLL) a sample is negative when score <= 0 and
        L = positive_coef * agg(positives) + negative_coef * agg(negatives), each aggregated on its own
        tokens. pg_clipfrac reports the share of tokens with alpha < 1.
    Names:
        Trinity-RFT `policy_loss_fn: topr` (`advantage_threshold`); ROLL `use_topr_neg_loss_coef`,
        `postive_loss_coef`; not in verl.
    Paper:
        Le Roux et al. 2025, Tapered Off-Policy REINFORCE, arXiv:2503.14286.
    """
    old, logp, adv, mask = _f32(old_logprob, logprob, advantages, response_mask)
    ratio = torch.exp(torch.clamp(logp.detach() - old, min=-20.0, max=20.0))
    truncated = torch.clamp(ratio, 0.0, 1.0)
    agg = dict(loss_scale_factor=loss_scale_factor, weights=sample_weights)
    if scores is None:
        negative = adv <= advantage_threshold  # (B, T)
        alpha = torch.where(negative, truncated, torch.ones_like(truncated))
        loss = aggregate_loss(-alpha * adv * logp, mask, loss_agg_mode, **agg)
    else:
        negative = (scores.float().reshape(-1, 1) <= 0).expand_as(mask)  # (B, T)
        alpha = torch.where(negative, truncated, torch.ones_like(truncated))
        pos = aggregate_loss(-adv * logp, mask * (~negative).float(), loss_agg_mode, **agg)
        neg = aggregate_loss(-truncated * adv * logp, mask * negative.float(), loss_agg_mode, **agg)
        loss = positive_coef * pos + negative_coef * neg
    clipfrac = masked_mean((alpha < 1.0).float(), mask)
    return LossOutput(loss, _metrics(clipfrac, masked_mean(old - logp.detach(), mask), 0.0))


@register_policy_loss("topr_roll")
def topr_roll_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    scores: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """TOPR as ROLL splits it: by each response's score, not by the sign of the advantage.

    Formula:
        negative = score <= 0 (per response); alpha = sg[clip(pi / pi_old, 0, 1)];
        L = agg_pos(-A log pi) + agg_neg(-alpha A log pi), each aggregated over its own tokens.
        The actor passes `scores` (B,), each response's summed token-level scores, to a loss that
        requires them. `topr_loss` with `scores` and both coefficients 1.
    Names:
        ROLL `use_topr_loss: true`; not in verl or Trinity-RFT (Trinity's topr is `topr`).
    Paper:
        Le Roux et al. 2025, Tapered Off-Policy REINFORCE, arXiv:2503.14286.
    """
    return topr_loss(
        old_logprob=old_logprob, logprob=logprob, advantages=advantages, response_mask=response_mask,
        loss_agg_mode=loss_agg_mode, scores=scores, loss_scale_factor=loss_scale_factor, sample_weights=sample_weights,
    )


@register_policy_loss("opmd")
def opmd_loss(
    *,
    old_logprob: torch.Tensor | None,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    tau: float = 1.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """OPMD: the policy gradient scaled by 1 / (1 + tau), the mirror-descent step's regulariser.

    Formula:
        L = agg(-A log pi) / (1 + tau).
    Names:
        Trinity-RFT `policy_loss_fn: opmd` (`tau`); not in verl or ROLL.
    Paper:
        Pan et al. 2025, Trinity-RFT, arXiv:2505.17826; Tomar et al. 2020, Mirror Descent Policy
        Optimization, arXiv:2005.09814.
    """
    logp, adv, mask = _f32(logprob, advantages, response_mask)
    loss = aggregate_loss(-adv * logp, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    kl = 0.0 if old_logprob is None else masked_mean(old_logprob.float() - logp.detach(), mask)
    return LossOutput(loss / (1.0 + tau), _metrics(0.0, kl, 0.0))
