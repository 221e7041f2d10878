"""Data parallelism as a role sees it: which rows of a batch are its own, and the few collectives
that make N processes compute what one would.

A role (actor, critic, reference, rollout) holds a `DataParallel` and never asks how many processes
exist: it calls `dp.share(...)` to pick its rows, `dp.pad_units(...)` before a loop of forwards,
`dp.sum(...)` for metrics and `dp.gather_rows(...)` for per-row results. With one process
(`DataParallel()`, the default) every call is the identity, so the single-process run executes the
same code as rank 0 of a cluster.

The invariants that keep a distributed step equal to the single-process step:

- Every rank receives the whole batch and cuts it the same way (same generator, same permutation),
  so mini-batches and their loss normalisers are global. A rank then takes its share of each
  mini-batch; per-micro-batch loss weights are the micro-batch's share of the GLOBAL normaliser, and
  gradients are summed over ranks (FSDP's reduce with divide factor 1, `posttrain.cluster.fsdp`),
  so the summed gradient is the single-process gradient of the whole mini-batch.
- Sharded models run collectives inside every forward and backward (FSDP all-gathers each layer),
  so every rank must run the same number of them: `pad_units` adds zero-weight units to ranks with
  fewer micro-batches (their forwards run; their backward contributes exactly zero).
- Metrics that are weighted shares of the global normaliser add up over ranks (`sum`); values that
  are the same on every rank (grad norm after the reduction, learning rate) are left as they are.
- With Ulysses sequence parallelism (`seq`, `posttrain.models.ulysses`) the ranks form a dp x sp
  grid: the sp ranks of one data-parallel rank hold the same rows, split each sequence between them,
  and each computes the whole loss of those rows; each weighs its loss by `loss_share` = 1/sp, so
  the gradient, summed over every rank, is still the single-process one. `sum`, `gather_rows` and
  `max_count` run over the data-parallel group only: the sp ranks of a group hold the same values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import torch
import torch.distributed as dist

from posttrain.models.ulysses import SequenceGroup

T = TypeVar("T")


def balanced_shares(costs: Sequence[int], parts: int) -> list[list[int]]:
    """Rows 0..n-1 split into `parts` lists of near-equal total cost (and near-equal counts),
    each list in ascending row order. Deterministic: every rank computes the same split.

    Longest-processing-time first: rows by decreasing cost, each to the part with the least cost so
    far (ties: fewer rows, then lower part index). Its total is within 4/3 of the best possible
    (Graham 1969), which is plenty for balancing token counts across ranks (verl's `balance_batch`
    uses Karmarkar-Karp for the same purpose).

    >>> balanced_shares([5, 1, 4, 2, 3, 3], 2)
    [[0, 3, 4], [1, 2, 5]]
    """
    loads = [(0, 0, p) for p in range(parts)]  # (cost, rows, part)
    out: list[list[int]] = [[] for _ in range(parts)]
    for row in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        load = min(loads)
        cost, count, part = load
        out[part].append(row)
        loads[part] = (cost + costs[row], count + 1, part)
    return [sorted(rows) for rows in out]


def contiguous_shares(n: int, parts: int) -> list[list[int]]:
    """Rows 0..n-1 in `parts` consecutive runs whose lengths differ by at most one (earlier runs
    longer). Keeps a prompt's group of responses together when the group size divides the share.

    >>> contiguous_shares(5, 2)
    [[0, 1, 2], [3, 4]]
    """
    base, extra = divmod(n, parts)
    out, start = [], 0
    for p in range(parts):
        size = base + (p < extra)
        out.append(list(range(start, start + size)))
        start += size
    return out


@dataclass
class DataParallel:
    """This process's place among the ranks of one role; `DataParallel()` is a single process."""

    rank: int = 0
    size: int = 1
    group: Any = None  # the role's torch.distributed process group; None with one process
    balance: bool = True  # trainer.balance_batch: share rows by token count, else contiguous runs
    seq: SequenceGroup | None = None  # the role's sequence-parallel group (ulysses_sequence_parallel_size > 1)

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} outside a world of {self.size}")
        if self.size > 1 and self.group is None:
            raise ValueError("a DataParallel of more than one rank needs its process group")

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def loss_share(self) -> float:
        """The weight of this rank's loss: 1/sp, as every rank of an sp group computes the same loss."""
        return 1.0 / self.seq.size if self.seq is not None else 1.0

    def shares(self, costs: Sequence[int]) -> list[list[int]]:
        """Every rank's rows of a batch whose rows cost `costs` (tokens); the same on every rank."""
        if self.size == 1:
            return [list(range(len(costs)))]
        if self.balance:
            return balanced_shares(costs, self.size)
        return contiguous_shares(len(costs), self.size)

    def share(self, costs: Sequence[int]) -> list[int]:
        """This rank's rows (ascending) of a batch whose rows cost `costs`."""
        return self.shares(costs)[self.rank]

    def max_count(self, count: int) -> int:
        """The largest `count` over the ranks (one small all-reduce)."""
        if self.size == 1:
            return count
        t = torch.tensor([count], dtype=torch.long)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return int(t.item())

    def pad_units(self, units: list[T], dummy: Callable[[], T]) -> list[tuple[T, bool]]:
        """`units` as (unit, real) pairs, followed by `(dummy(), False)` pairs until every rank has
        as many as the rank with the most: each unit costs collectives in a sharded forward."""
        target = self.max_count(len(units))
        return [(u, True) for u in units] + [(dummy(), False) for _ in range(target - len(units))]

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Each key summed over the ranks (keys must be the same on every rank)."""
        if self.size == 1 or not values:
            return dict(values)
        keys = sorted(values)
        t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
        dist.all_reduce(t, group=self.group)
        return dict(zip(keys, t.tolist()))

    def gather_rows(self, part: torch.Tensor, shares: list[list[int]], total: int) -> torch.Tensor:
        """Per-row results of this rank's rows (`part`, (len(shares[rank]), ...)) assembled into
        (total, ...) in the batch's row order, on every rank. Trailing dimensions must agree."""
        if self.size == 1:
            return part
        longest = max(len(s) for s in shares)
        padded = part.new_zeros((longest, *part.shape[1:]))
        padded[: len(part)] = part
        pieces = [torch.empty_like(padded) for _ in range(self.size)]
        dist.all_gather(pieces, padded.contiguous(), group=self.group)
        out = part.new_zeros((total, *part.shape[1:]))
        for rows, piece in zip(shares, pieces):
            if rows:
                out[torch.tensor(rows, dtype=torch.long, device=out.device)] = piece[: len(rows)].to(out.device)
        return out

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank (pickled; for small records)."""
        if self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out
