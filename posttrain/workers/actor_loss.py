"""The actor's loss on one micro-batch, from its forward's log-probs and entropies (the formula is
in `posttrain.workers.actor`'s docstring; the router terms, which need the forward's captured
router logits, are added by the actor after this).

Each token term is aggregated with the same `loss_agg_mode` (as verl does): the registered policy
loss with its declared extra inputs, ROLL's sample weights and rl_loss_coef, the entropy bonus, the
KL loss, ROLL's SFT term on positive responses and v0.1's TOPR terms, and the top-k distillation
term, which with `topk_kl.policy_loss` false is the whole loss.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from posttrain.algorithms import aggregate_loss, kl_penalty, sample_loss_weights, topr_loss
from posttrain.errors import DataError
from posttrain.models.logprobs import TokenLogProbs
from posttrain.records import RolloutBatch
from posttrain.workers.actor_settings import ActorSettings
from posttrain.workers.topk_kl import topk_kl_term


def micro_objective(s: ActorSettings, loss_fn: Callable[..., object], out: TokenLogProbs, micro: RolloutBatch, step: int,
                    sft_term: Callable[[RolloutBatch, Tensor, Tensor], Tensor]) -> tuple[Tensor, dict[str, float]]:
    """(loss, its parts as metrics) of `micro` given the training forward's `out`. `step` is the
    trainer step (for losses that declare global_step); `sft_term(micro, logprobs, mask)` is the
    micro-batch's share of the mini-batch's SFT term (it needs the mini-batch's totals)."""
    mask = micro.train_mask  # response_mask less the tokens rollout correction and ROLL's sample filters rejected
    topk = s.topk_kl
    if topk is not None and not topk.policy_loss:  # pure on-policy distillation: the top-k term is the loss
        loss, parts = topk_kl_term(out.gathered, micro, topk, mask, s.loss_agg_mode, s.loss_scale_factor)
        entropy = aggregate_loss(out.entropy, mask, s.loss_agg_mode, loss_scale_factor=s.loss_scale_factor)
        parts["actor/entropy"] = float(entropy.detach())
        return loss, parts
    agg = dict(loss_agg_mode=s.loss_agg_mode)
    weights = sample_weights(s, micro)  # (b,) or None
    if micro.rollout_is_weights is not None:  # algorithm.rollout_is: weights the policy loss only, as verl
        weights = micro.rollout_is_weights if weights is None else micro.rollout_is_weights * weights.unsqueeze(-1)
    if weights is not None:
        agg["sample_weights"] = weights
    if "scores" in s.loss_inputs:  # the response's score (topr_roll): its token-level scores sum to it
        agg["scores"] = micro.token_level_scores.sum(-1)  # (b,)
    if "expert_mask" in s.loss_inputs:
        agg["expert_mask"] = micro.expert_mask  # (b,) bool
    if "global_step" in s.loss_inputs:
        agg["global_step"] = step
    pg = loss_fn(
        old_logprob=micro.old_logprobs,
        logprob=out.logprobs,
        advantages=micro.advantages,
        response_mask=mask,
        loss_scale_factor=s.loss_scale_factor,
        **agg,
        **s.loss_options,
    )
    # ROLL's rl_loss_coef scales the policy and KL losses, not the entropy bonus (1.0 leaves them exact)
    loss = s.rl_loss_coef * pg.loss
    entropy = aggregate_loss(out.entropy, mask, s.loss_agg_mode, loss_scale_factor=s.loss_scale_factor)
    if s.entropy_coeff != 0.0:
        loss = loss - s.entropy_coeff * entropy
    parts = {"actor/pg_loss": float(pg.loss.detach()), "actor/entropy": float(entropy.detach())}
    if weights is not None and weights.dim() == 1:  # ROLL's difficulty/length weights, as ROLL logs them
        parts.update({"actor/sample_weights_min": float(weights.min()), "actor/sample_weights_max": float(weights.max())})
    parts.update({f"actor/{k}": float(v) for k, v in pg.metrics.items()})
    if s.use_kl_loss:
        kld = kl_penalty(out.logprobs, micro.ref_logprobs, s.kl_loss_type)  # (b, T)
        kl_loss = aggregate_loss(kld, mask, s.loss_agg_mode, loss_scale_factor=s.loss_scale_factor)
        loss = loss + s.rl_loss_coef * s.kl_loss_coef * kl_loss
        parts["actor/kl_loss"] = float(kl_loss.detach())
        parts["actor/kl_coef"] = s.kl_loss_coef
    if s.sft_loss_coef:
        sft = sft_term(micro, out.logprobs, mask)
        loss = loss + s.sft_loss_coef * sft
        parts["actor/sft_loss"] = float(sft.detach())
    if any(s.topr_coefs):  # ROLL v0.1's TOPR terms: outside rl_loss_coef, without sample weights
        positive, negative = s.topr_coefs
        topr = topr_loss(old_logprob=micro.old_logprobs, logprob=out.logprobs, advantages=micro.advantages, response_mask=mask,
                         loss_agg_mode=s.loss_agg_mode, scores=micro.token_level_scores.sum(-1), positive_coef=positive,
                         negative_coef=negative, loss_scale_factor=s.loss_scale_factor).loss
        loss, parts["actor/topr_loss"] = loss + topr, float(topr.detach())
    if topk is not None:
        term, topk_parts = topk_kl_term(out.gathered, micro, topk, mask, s.loss_agg_mode, s.loss_scale_factor)
        loss = loss + term
        parts.update(topk_parts)
    return loss, parts


def sample_weights(s: ActorSettings, micro: RolloutBatch) -> Tensor | None:
    """ROLL's difficulty and length weights of this micro-batch's responses (ROLL computes them
    per micro-batch too), or None when both are off."""
    if not (s.difficulty_loss_weight or s.length_loss_weight):
        return None
    difficulty = difficulty_of(micro.extra_info, micro.data_source) if s.difficulty_loss_weight else None
    return sample_loss_weights(micro.response_mask, difficulty, s.length_loss_weight)  # (b,)


def difficulty_of(extra_info: list[dict], data_source: list[str]) -> Tensor:
    """(b,) each row's `extra_info["difficulty"]`, a number (algorithm.difficulty_loss_weight)."""
    values = []
    for i, info in enumerate(extra_info):
        value = (info or {}).get("difficulty")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DataError(
                f"algorithm.difficulty_loss_weight: a row of data source {data_source[i]!r} has extra_info.difficulty "
                f"{value!r}; every training row needs a number in [0, 1] there (harder prompts weigh more), or turn the weights off"
            )
        values.append(float(value))
    return torch.tensor(values)
