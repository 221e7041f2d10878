"""SFT and RL in one batch: expert rows (SFT data) train by likelihood, explored rows by PPO.

`mix` and `mix_chord` take `expert_mask` (B,) bool: True on the rows that came from expert data
(`algorithm.mix`, posttrain.trainer.mixing), whose advantages and old log-probs are zero and unused.
The two parts are each aggregated over their own rows, then blended by mu:

    L = (1 - mu) * PPO(explored rows) + mu * SFT(expert rows)

`sft_is` and `sft_phi` are the token-weighted SFT losses CHORD uses for the expert part; they are
registered on their own too (as `sft`, they read no advantage).
"""

from __future__ import annotations

import math

import torch

from posttrain.algorithms.aggregation import aggregate_loss
from posttrain.algorithms.policy_losses import ppo_clip_loss
from posttrain.algorithms.registry import LossOutput, register_policy_loss
from posttrain.algorithms.supervised import sft_loss


def _sft_metrics(loss: torch.Tensor) -> dict[str, float]:
    return {"pg_clipfrac": 0.0, "ppo_kl": 0.0, "pg_clipfrac_lower": 0.0, "sft_loss": float(loss.detach())}


@register_policy_loss("sft_is")
def sft_is_loss(
    *,
    old_logprob: torch.Tensor | None,
    logprob: torch.Tensor,
    advantages: torch.Tensor | None,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """SFT weighted by each target token's own probability (an importance weight from a uniform view).

    Formula:
        L = agg(-sg[pi(y_t)] log pi(y_t)): tokens the policy already finds unlikely weigh less.
    Names:
        Trinity-RFT `policy_loss_fn: sft_is`; not in verl or ROLL.
    Paper:
        CHORD: On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and
        Reinforcement Learning via Dynamic Weighting (2025), arXiv:2508.11408.
    """
    logp, mask = logprob.float(), response_mask.float()
    loss = aggregate_loss(-logp * torch.exp(logp).detach(), mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    return LossOutput(loss, _sft_metrics(loss))


@register_policy_loss("sft_phi")
def sft_phi_loss(
    *,
    old_logprob: torch.Tensor | None,
    logprob: torch.Tensor,
    advantages: torch.Tensor | None,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    cutoff_prob: float = 1.0,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """CHORD's phi-weighted SFT: each token weighted by p (1 - p), so near-certain and near-impossible
    expert tokens both weigh little.

    Formula:
        p = pi(y_t); L = agg(-sg[p (1 - p)] min(log p, log cutoff_prob)) (cutoff 1 clips nothing).
    Names:
        Trinity-RFT `policy_loss_fn: sft_phi` (`cutoff_prob`); the expert loss of `mix_chord` with
        `enable_phi_function`; not in verl or ROLL.
    Paper:
        CHORD (2025), arXiv:2508.11408 (the token-wise weighting phi).
    """
    if not 0.0 < cutoff_prob <= 1.0:
        raise ValueError(f"sft_phi cutoff_prob must lie in (0, 1], got {cutoff_prob}")
    logp, mask = logprob.float(), response_mask.float()
    prob = torch.exp(logp).detach()
    clipped = torch.clamp(logp, max=math.log(cutoff_prob)) if cutoff_prob < 1.0 else logp
    loss = aggregate_loss(-clipped * prob * (1.0 - prob), mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, weights=sample_weights)
    return LossOutput(loss, _sft_metrics(loss))


def _blend(
    mu: float, expert_mask: torch.Tensor, ppo_args: dict, sft_fn, sft_args: dict
) -> LossOutput:
    """(1 - mu) * PPO over the explored rows + mu * `sft_fn` over the expert rows, each part
    aggregated over its own tokens (a part with no rows adds 0)."""
    mask = ppo_args["response_mask"].float()
    expert = expert_mask.to(device=mask.device, dtype=torch.bool).reshape(-1, 1)  # (B, 1)
    ppo = ppo_clip_loss(**{**ppo_args, "response_mask": mask * (~expert).float()})
    sft = sft_fn(**{**sft_args, "response_mask": mask * expert.float()})
    loss = (1.0 - mu) * ppo.loss + mu * sft.loss
    metrics = dict(ppo.metrics)
    metrics.update({"usual_pg_loss": float(ppo.loss.detach()), "expert_sft_loss": float(sft.loss.detach()), "mu": float(mu)})
    return LossOutput(loss, metrics)


def _part_aggregations(
    loss_agg_mode: str, grpo_mode: str | None, sft_mode: str | None, loss_scale_factor: float | None, sample_weights: torch.Tensor | None
) -> tuple[dict, dict]:
    """The aggregation keywords of the PPO part and of the SFT part: each part's own mode where one
    is given, else the loss's (Trinity-RFT: `grpo_loss_agg_mode or loss_agg_mode`, likewise sft)."""
    shared = dict(loss_scale_factor=loss_scale_factor, sample_weights=sample_weights)
    return dict(loss_agg_mode=grpo_mode or loss_agg_mode, **shared), dict(loss_agg_mode=sft_mode or loss_agg_mode, **shared)


@register_policy_loss("mix")
def mix_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    expert_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    mu: float = 0.1,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
    sft_loss_agg_mode: str | None = None,
    grpo_loss_agg_mode: str | None = None,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """MIX: PPO on explored rows and SFT on expert rows of the same batch, blended by a fixed mu.

    Formula:
        L = (1 - mu) agg_u(PPO-clip, dual clip c = clip_ratio_c) + mu agg_e(-log pi), agg_u over the tokens of rows with
        expert_mask False, agg_e over those with True (each normalised by its own count); agg_u
        reduces with grpo_loss_agg_mode, agg_e with sft_loss_agg_mode (null: loss_agg_mode).
    Names:
        Trinity-RFT `policy_loss_fn: mix` (`mu`, `clip_range*`, `sft_loss_agg_mode`,
        `grpo_loss_agg_mode`), the loss of `algorithm_type: mix`
        (expert rows from `buffer.trainer_input.auxiliary_buffers`, `sample_strategy: mix`); not in
        verl or ROLL.
    Paper:
        Pan et al. 2025, Trinity-RFT, arXiv:2505.17826 (mixing expert SFT data into RL).
    Deviation:
        each micro-batch blends its own two means, and the actor weighs the result by
        actor.micro_batch_weight: rows (a Trinity-RFT file's default) is Trinity-RFT's weighting by
        row counts, exact for fixed-size micro-batches; normaliser weighs by the micro-batch's share of
        the mini-batch's tokens, exact when a micro-batch is the whole mini-batch.
    """
    if not 0.0 <= mu <= 1.0:
        raise ValueError(f"mix mu must lie in [0, 1], got {mu}")
    ppo_agg, sft_agg = _part_aggregations(loss_agg_mode, grpo_loss_agg_mode, sft_loss_agg_mode, loss_scale_factor, sample_weights)
    ppo_args = dict(old_logprob=old_logprob, logprob=logprob, advantages=advantages, response_mask=response_mask,
                    clip_ratio=clip_ratio, clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high, clip_ratio_c=clip_ratio_c, **ppo_agg)
    sft_args = dict(old_logprob=None, logprob=logprob, advantages=None, response_mask=response_mask, **sft_agg)
    return _blend(mu, expert_mask, ppo_args, sft_loss, sft_args)


def chord_mu(step: int, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> float:
    """CHORD's schedule of mu: linear warm-up from 0 to `peak`, then cosine decay to `valley`.

    >>> chord_mu(0, 2, 4, 0.5, 0.1), chord_mu(1, 2, 4, 0.5, 0.1), chord_mu(4, 2, 4, 0.5, 0.1)
    (0.0, 0.25, 0.30000000000000004)
    >>> chord_mu(6, 2, 4, 0.5, 0.1), chord_mu(3, 0, 0, 0.5, 0.1)
    (0.1, 0.1)
    """
    if step < warmup_steps:
        return step / warmup_steps * peak
    if step >= warmup_steps + decay_steps:
        return valley
    cosine = 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / decay_steps))
    return (peak - valley) * cosine + valley


@register_policy_loss("mix_chord")
def mix_chord_loss(
    *,
    old_logprob: torch.Tensor,
    logprob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    expert_mask: torch.Tensor,
    global_step: int,
    loss_agg_mode: str = "token-mean",
    mu_warmup_steps: int = 0,
    mu_decay_steps: int = 0,
    mu_peak: float = 0.1,
    mu_valley: float = 0.1,
    enable_phi_function: bool = True,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
    sft_loss_agg_mode: str | None = None,
    grpo_loss_agg_mode: str | None = None,
    loss_scale_factor: float | None = None,
    sample_weights: torch.Tensor | None = None,
) -> LossOutput:
    """CHORD: MIX with a scheduled mu and a phi-weighted SFT part.

    Formula:
        mu = chord_mu(global_step, mu_warmup_steps, mu_decay_steps, mu_peak, mu_valley);
        L = (1 - mu) agg_u(PPO-clip) + mu agg_e(SFT), the SFT part `sft_phi` (p (1 - p) token
        weights) with `enable_phi_function`, else plain `sft`; agg_u and agg_e as in `mix`
        (grpo_loss_agg_mode, sft_loss_agg_mode, each null: loss_agg_mode).
    Names:
        Trinity-RFT `policy_loss_fn: mix_chord` (the same option names), the loss of `algorithm_type:
        mix_chord`; not in verl or ROLL.
    Paper:
        CHORD: On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and
        Reinforcement Learning via Dynamic Weighting (2025), arXiv:2508.11408.
    Deviation:
        as `mix`: each micro-batch blends its own two means.
    """
    mu = chord_mu(int(global_step), mu_warmup_steps, mu_decay_steps, mu_peak, mu_valley)
    ppo_agg, sft_agg = _part_aggregations(loss_agg_mode, grpo_loss_agg_mode, sft_loss_agg_mode, loss_scale_factor, sample_weights)
    ppo_args = dict(old_logprob=old_logprob, logprob=logprob, advantages=advantages, response_mask=response_mask,
                    clip_ratio=clip_ratio, clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high, clip_ratio_c=clip_ratio_c, **ppo_agg)
    sft_args = dict(old_logprob=None, logprob=logprob, advantages=None, response_mask=response_mask, **sft_agg)
    return _blend(mu, expert_mask, ppo_args, sft_phi_loss if enable_phi_function else sft_loss, sft_args)
