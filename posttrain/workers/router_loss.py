"""The MoE router's loss terms of a micro-batch (load balancing and z-loss), shared by the actor, the critic and the SFT/DPO step.

Megatron attaches each micro-batch's router losses to the layer outputs and scales its gradient by
1 / (micro-batches x data-parallel ranks): the mean over the step's micro-batches. posttrain weighs
each micro-batch's by its share of the mini-batch's real (prompt + response) tokens, the same
weights when micro-batches hold equally many tokens, and divides by the weight
`posttrain.workers.microbatch.accumulate_gradients` multiplies the micro-batch's loss by.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.algorithms import load_balancing_loss, router_z_loss
from posttrain.cluster.parallel import DataParallel
from posttrain.models.moe import RouterCapture, RouterWeights, group_sum
from posttrain.records import RolloutBatch
from posttrain.workers.microbatch import micro_share, normaliser


def mini_totals(mini: RolloutBatch, loss_agg_mode: str) -> tuple[float, float, int]:
    """(real tokens, loss normaliser, rows) of a whole mini-batch: the same on every rank."""
    return float(mini.prompt_mask.sum() + mini.response_mask.sum()), normaliser(mini.train_mask, loss_agg_mode), len(mini)


def router_term(
    routers: RouterCapture, micro: RolloutBatch, totals: tuple[float, float, int], loss_agg_mode: str, weights: RouterWeights,
    dp: DataParallel, by_rows: bool = False,
) -> tuple[Tensor, dict[str, float]]:
    """(term, metrics) of one RL micro-batch: the term goes into its loss, so that after
    accumulate_gradients' weighting (`by_rows`: its) it adds share x the weighted router losses; each
    metric, weighted alike, sums to the token-weighted mean of its loss. Under Ulysses the term is this
    rank's part of it."""
    tokens, norm, rows = totals
    share = float(micro.prompt_mask.sum() + micro.response_mask.sum()) / tokens if tokens > 0 else 0.0
    weight = micro_share(micro.train_mask, norm, rows, loss_agg_mode, by_rows)[1]
    # weight 0: no trained token here, so accumulate_gradients drops the whole micro-batch's loss
    return scaled_router_term(routers, share / weight if weight > 0 else 0.0, weights, dp)


def scaled_router_term(routers: RouterCapture, scale: float, weights: RouterWeights, dp: DataParallel) -> tuple[Tensor, dict[str, float]]:
    """(scale x the weighted router losses of the captured forward, {"moe_aux_loss": scale x the
    load-balancing loss, "moe_z_loss": scale x the z-loss}, each only when its weight is positive):
    the term a micro-batch adds to its loss before `accumulate_units` multiplies that by
    `dp.loss_share`. The SFT and DPO steps, whose micro-batch losses carry their weight already, pass
    the micro-batch's share of the batch's real tokens as `scale` (`posttrain.trainer.sft.accumulate`)."""
    if routers.token_mask is None or not routers.logits:
        raise RuntimeError("moe_aux_loss_coef / moe_z_loss_coef: the forward pass reported no router logits or token layout")
    split = routers.group is not None  # Ulysses: this rank routed its columns of the rows only
    reduce = group_sum(routers.group) if split else None
    losses: dict[str, tuple[float, Tensor]] = {}  # split: each is this rank's share
    if weights.aux > 0:
        losses["moe_aux_loss"] = weights.aux, load_balancing_loss(routers.logits, routers.token_mask, weights.top_k, reduce=reduce)
    if weights.z > 0:
        losses["moe_z_loss"] = weights.z, router_z_loss(routers.logits, routers.token_mask, reduce=reduce)
    term = sum((coef * loss for coef, loss in losses.values()), routers.token_mask.new_zeros((), dtype=torch.float32))
    # accumulate_units weighs each sp rank's loss by 1/sp, as the ranks' other losses are copies of
    # one number; the shares differ and add up over the ranks, so each backpropagates its whole share
    term = term * (scale / dp.loss_share if split else scale)
    return term, {name: float(reduce(loss.detach()) if split else loss.detach()) * scale for name, (_, loss) in losses.items()}
