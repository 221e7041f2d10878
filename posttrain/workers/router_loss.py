"""The MoE router's load-balancing term of a micro-batch, shared by the actor, the critic and the SFT/DPO step.

Megatron attaches each micro-batch's router loss to the layer outputs and scales its gradient by
1 / (micro-batches x data-parallel ranks): the mean over the step's micro-batches. posttrain weighs
each micro-batch's by its share of the mini-batch's real (prompt + response) tokens, the same
weights when micro-batches hold equally many tokens, and divides by the weight
`posttrain.workers.microbatch.accumulate_gradients` multiplies the micro-batch's loss by.
"""

from __future__ import annotations

from torch import Tensor

from posttrain.algorithms import load_balancing_loss
from posttrain.cluster.parallel import DataParallel
from posttrain.models.moe import RouterCapture, group_sum
from posttrain.records import RolloutBatch
from posttrain.workers.microbatch import loss_weight, micro_weight, normaliser


def mini_totals(mini: RolloutBatch, loss_agg_mode: str) -> tuple[float, float]:
    """(real tokens, loss normaliser) of a whole mini-batch: the same on every rank."""
    return float(mini.prompt_mask.sum() + mini.response_mask.sum()), normaliser(mini.train_mask, loss_agg_mode)


def router_term(
    routers: RouterCapture, micro: RolloutBatch, totals: tuple[float, float], loss_agg_mode: str, top_k: int, dp: DataParallel,
) -> tuple[Tensor, float]:
    """(term, metric) of one RL micro-batch: the term goes into its loss, so that after
    accumulate_gradients' weighting it adds share x load-balancing loss; the metric, weighted alike,
    sums to the token-weighted mean of the loss. Under Ulysses the term is this rank's part of it."""
    tokens, norm = totals
    share = float(micro.prompt_mask.sum() + micro.response_mask.sum()) / tokens if tokens > 0 else 0.0
    weight = loss_weight(micro_weight(micro.train_mask, norm, loss_agg_mode), loss_agg_mode)
    # weight 0: no trained token here, so accumulate_gradients drops the whole micro-batch's loss
    return scaled_router_term(routers, share / weight if weight > 0 else 0.0, top_k, dp)


def scaled_router_term(routers: RouterCapture, scale: float, top_k: int, dp: DataParallel) -> tuple[Tensor, float]:
    """(scale x the load-balancing loss of the captured forward, its value): the term a micro-batch
    adds to its loss before `accumulate_units` multiplies that by `dp.loss_share`. The SFT and DPO
    steps, whose micro-batch losses carry their weight already, pass the micro-batch's share of the
    batch's real tokens as `scale` (`posttrain.trainer.sft.accumulate`)."""
    if routers.token_mask is None or not routers.logits:
        raise RuntimeError("moe_aux_loss_coef: the forward pass reported no router logits or token layout")
    split = routers.group is not None  # Ulysses: this rank routed its columns of the rows only
    reduce = group_sum(routers.group) if split else None
    aux = load_balancing_loss(routers.logits, routers.token_mask, top_k, reduce=reduce)  # split: this rank's share
    if not split:
        return aux * scale, float(aux.detach()) * scale
    # accumulate_units weighs each sp rank's loss by 1/sp, as the ranks' other losses are copies of
    # one number; the shares differ and add up over the ranks, so each backpropagates its whole share
    return aux * (scale / dp.loss_share), float(reduce(aux.detach())) * scale
