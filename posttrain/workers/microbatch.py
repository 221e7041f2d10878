"""Mini-batches and micro-batches of a rollout batch, and the weights that make gradient
accumulation exact.

Why weights: a loss aggregated over a micro-batch is normalised by that micro-batch's tokens (or
sequences). Summing micro-batch losses unweighted would give a gradient that depends on how the
mini-batch was cut. Scaling each micro-batch loss by its share of the mini-batch's normaliser makes
the accumulated gradient equal the gradient of the whole mini-batch's loss, for every split, every
`loss_agg_mode` and the token-budget (dynamic batch size) packing alike. `token-sum` divides by
nothing, so its micro-batch losses add up as they are (weight 1); its metrics that are not loss
values (clip fractions, coefficients) are still averaged by each micro-batch's share of the tokens. Forwards without a loss
(log-probs, values) go through `forward_in_order`, which puts every row's result back in place.

With several data-parallel ranks (`posttrain.cluster.parallel`) the same functions run on every
rank: each computes its share of the rows, weights its micro-batches by their share of the whole
mini-batch's normaliser, and runs as many forwards as the busiest rank (zero-weight padding units).

The SFT/DPO step (`posttrain.trainer.sft`) shares the accumulation loop (`accumulate_units`),
`clip_and_step` and the token-budget packer (`posttrain.records.pack_greedy`); its micro-batches
are lists of examples rather than RolloutBatch records, so the cutting itself stays with each.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, TypeVar

import torch

from posttrain.cluster.parallel import DataParallel
from posttrain.models.ulysses import sequence_parallel
from posttrain.records import MicroBatches, RolloutBatch
from posttrain.workers.balanced_split import balanced_split

SINGLE = DataParallel()  # one process: every data-parallel call is the identity
U = TypeVar("U")  # a micro-batch: a RolloutBatch (RL) or a list of examples (SFT/DPO)


def mini_batches(batch: RolloutBatch, size: int, *, shuffle: bool, generator: torch.Generator | None) -> list[RolloutBatch]:
    """Cut a rollout batch into mini-batches of `size` rows (one optimizer step each).

    With `shuffle`, rows are permuted first (a fresh permutation per call, from `generator`).
    Expert rows joined for the mix losses (`expert_mask`) do not count toward `size`: the explored
    rows are cut as without them and the expert rows are dealt out evenly over those mini-batches,
    so mixing adds no optimizer step and every step sees both kinds.
    """
    if shuffle:
        order = torch.randperm(len(batch), generator=generator)
        batch = batch[order]
    if batch.expert_mask is None or not bool(batch.expert_mask.any()):
        return batch.split(size)
    explored = batch[~batch.expert_mask].split(size)
    expert = batch[batch.expert_mask]
    shares = torch.tensor_split(torch.arange(len(expert)), len(explored))  # as even as the counts allow
    return [RolloutBatch.cat([part, expert[rows]]) if len(rows) else part for part, rows in zip(explored, shares)]


def cut(batch: RolloutBatch, *, size: int | None, max_tokens: int | None) -> MicroBatches:
    """Cut a batch into forward/backward units: `size` rows each in order, or packed by a token
    budget when `max_tokens` is set (dynamic batch size, rows reordered by length). Each unit is
    trimmed of all-padding columns; `MicroBatches.index` records where every row came from."""
    if max_tokens is not None:
        return batch.split_by_tokens(max_tokens)
    parts = [part.trim() for part in batch.split(size or len(batch))]
    return MicroBatches(parts, torch.arange(len(batch)))


def micro_batches(batch: RolloutBatch, *, size: int | None, max_tokens: int | None) -> list[RolloutBatch]:
    """The units of `cut`, for loops that reduce over them (losses) and need no row order back."""
    return cut(batch, size=size, max_tokens=max_tokens).batches


def forward_in_order(
    batch: RolloutBatch,
    fn: Callable[[RolloutBatch], torch.Tensor],
    *,
    size: int | None,
    max_tokens: int | None,
    dp: DataParallel = SINGLE,
) -> torch.Tensor:
    """`fn` (a per-token forward: log-probs, values) on every micro-batch, results (B, T) in the
    batch's original row order and at its full response width, zero where a micro-batch was trimmed.

    One helper for the actor's and reference's log-probs and the critic's values, so the
    placement of token-budget packed (reordered) micro-batches is written once. With several ranks
    each computes its share of the rows and every rank returns the whole (B, T) result."""
    empty = batch.response_mask.new_zeros(0, batch.response_ids.shape[1])
    return forward_in_order_many(batch, lambda unit: (fn(unit),), (empty,), size=size, max_tokens=max_tokens, dp=dp)[0]


def forward_in_order_many(
    batch: RolloutBatch,
    fn: Callable[[RolloutBatch], tuple[torch.Tensor, ...]],
    empty: tuple[torch.Tensor, ...],
    *,
    size: int | None,
    max_tokens: int | None,
    dp: DataParallel = SINGLE,
) -> tuple[torch.Tensor, ...]:
    """`forward_in_order` for a forward with several per-row results (log-probs and the routes
    a router-replay record took, posttrain.models.router_replay): `empty` holds a zero-row tensor
    shaped like each whole result (its dim 1 the full width each is right-padded to, its dtype)."""
    shares = dp.shares(batch.seq_lengths().tolist())
    mine = batch if not dp.distributed else batch[shares[dp.rank]]
    units = cut(mine, size=size, max_tokens=max_tokens) if len(mine) else None
    results = []
    with sequence_parallel(dp.seq):  # the role's forwards split each sequence over its sp ranks
        for unit, real in dp.pad_units(units.batches if units else [], lambda: batch[:1].trim()):
            out = fn(unit)  # a padding unit still runs: a sharded model's forward is a collective
            if real:
                results.append(out)
    gathered = []
    for k, like in enumerate(empty):
        local = units.restore([r[k] for r in results], width=like.shape[1]) if units else like
        gathered.append(dp.gather_rows(local, shares, len(batch)))
    return tuple(gathered)


def accumulate_gradients(
    mini: RolloutBatch,
    loss_fn: Callable[[RolloutBatch], tuple[torch.Tensor, dict[str, float]]],
    *,
    loss_agg_mode: str,
    size: int | None,
    max_tokens: int | None,
    dp: DataParallel = SINGLE,
    loss_values: frozenset[str] = frozenset(),
    by_rows: bool = False,
    balanced: bool = False,
) -> dict[str, float]:
    """Backward of one mini-batch's loss, micro-batch by micro-batch; returns the loss metrics of the
    whole mini-batch (summed over ranks).

    `loss_fn(micro) -> (loss, metrics)` aggregates over the micro-batch alone; each micro-batch's
    loss is scaled by `loss_weight` (its share of the mini-batch's normaliser, or 1 for token-sum),
    so the accumulated gradient -- summed over ranks -- is the gradient of the whole mini-batch's
    loss. Metrics named in `loss_values` (aggregates like the loss) get the same weight, so they
    report the mini-batch's loss; the others are averages weighted by `micro_weight`. A micro-batch
    that weighs nothing (no token left to train on) still runs forward and backward with weight 0,
    as a rank's padding units do (`accumulate_units`). `by_rows` weighs micro-batches by their rows
    instead (`micro_share`). `balanced`: with `max_tokens`, the micro-batches are verl's
    (`posttrain.workers.balanced_split`) rather than posttrain's packing."""
    total = normaliser(mini.train_mask, loss_agg_mode)  # of the whole mini-batch: the same on every rank
    mine = mini if not dp.distributed else mini[dp.share(mini.seq_lengths().tolist())]

    def weighted(unit: RolloutBatch) -> tuple[torch.Tensor, dict[str, float]]:
        share, weight = micro_share(unit.train_mask, total, len(mini), loss_agg_mode, by_rows)
        loss, parts = loss_fn(unit)
        return loss * weight, {k: v * (weight if k in loss_values else share) for k, v in parts.items()}

    if balanced and max_tokens is not None:  # verl's cut: every rank takes part in agreeing on the count
        units = balanced_split(mine, max_tokens, dp).batches
    else:
        units = micro_batches(mine, size=size, max_tokens=max_tokens) if len(mine) else []
    return accumulate_units(units, lambda: mini[:1].trim(), weighted, dp=dp)


def accumulate_units(
    units: list[U],
    padding: Callable[[], U],
    weighted_loss: Callable[[U], tuple[torch.Tensor, dict[str, float]]],
    *,
    dp: DataParallel = SINGLE,
    backward: bool = True,
) -> dict[str, float]:
    """Run this rank's micro-batches and sum their metrics over the ranks; with `backward`,
    accumulate their gradients. The one loop under RL's `accumulate_gradients` and the SFT/DPO
    step (`posttrain.trainer.sft.accumulate`).

    `weighted_loss(unit) -> (loss, metrics)` returns both already weighted by the unit's share of
    the WHOLE batch's normaliser, so the gradients and metrics of the units add up to the batch's
    whatever the split and however many ranks share it (their sums meet in FSDP's gradient
    reduction and in `dp.sum`). The units are RolloutBatch micro-batches for RL and lists of
    examples for SFT/DPO; only the weighting differs, and it stays with the caller.

    A rank with fewer units than the busiest runs `padding()` units until it has as many (a sharded
    model's forward and backward are collectives every rank must join): their loss is multiplied by
    0 before the backward, and their metrics add their keys (every rank must sum the same keys) but
    not their values. With sequence parallelism every sp rank computes the same loss; each
    backpropagates its `dp.loss_share` of it (`posttrain.cluster.parallel`)."""
    sums: dict[str, float] = defaultdict(float)
    with sequence_parallel(dp.seq):
        for unit, real in dp.pad_units(units, padding):
            loss, parts = weighted_loss(unit)
            if backward:
                (loss * dp.loss_share if real else loss * 0.0).backward()
            for key, value in parts.items():
                sums[key] += value if real else 0.0
    return dp.sum(sums)


def normaliser(mask: torch.Tensor, loss_agg_mode: str) -> float:
    """What `loss_agg_mode` averages over: valid tokens for token-mean (and token-sum, whose loss
    is not divided but whose other metrics are token averages), else sequences with a token."""
    if loss_agg_mode in ("token-mean", "token-sum"):
        return float(mask.sum())
    return float((mask.sum(-1) > 0).sum())


def micro_weight(micro_mask: torch.Tensor, mini_total: float, loss_agg_mode: str) -> float:
    """Share of the mini-batch's normaliser held by one micro-batch (0 when the mini-batch is empty)."""
    if mini_total <= 0:
        return 0.0
    return normaliser(micro_mask, loss_agg_mode) / mini_total


def micro_share(micro_mask: torch.Tensor, mini_total: float, mini_rows: int, loss_agg_mode: str, by_rows: bool = False) -> tuple[float, float]:
    """(share, weight) of one micro-batch in its mini-batch: its share of the normaliser and the
    weight of its loss (`micro_weight`, `loss_weight`). With `by_rows` both are its share of the
    mini-batch's rows, whatever the mode (actor.micro_batch_weight rows: Trinity-RFT's default, which
    scales each micro-batch's loss by 1 / the accumulation steps, or by its rows over the mini-batch's
    with dynamic batch size). A token-mean is then the mean of the micro-batches' own token means, and
    the gradient depends on how the mini-batch is cut."""
    if by_rows:
        share = micro_mask.shape[0] / mini_rows if mini_rows > 0 else 0.0
        return share, share
    share = micro_weight(micro_mask, mini_total, loss_agg_mode)
    return share, loss_weight(share, loss_agg_mode)


def loss_weight(share: float, loss_agg_mode: str) -> float:
    """Weight of a micro-batch's loss in the mini-batch's: its `share` of the normaliser, except for
    token-sum, whose mini-batch loss is the plain sum of its micro-batch sums (every rank's too)."""
    return 1.0 if loss_agg_mode == "token-sum" else share


def clip_and_step(optimizer: torch.optim.Optimizer, grad_clip: float | None) -> float:
    """Clip the global gradient norm (no clipping when `grad_clip` is None or <= 0) and step.

    Returns the norm before clipping. A non-finite norm skips the step and drops the gradients:
    one NaN would otherwise poison AdamW's moments for the rest of the run. With sharded
    parameters (FSDP's DTensors) the norm is over every shard of every rank: the same number on
    each rank, so every rank clips alike and takes (or skips) the step together.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    max_norm = grad_clip if grad_clip and grad_clip > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    if not torch.isfinite(torch.tensor(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        return grad_norm
    optimizer.step()
    return grad_norm
