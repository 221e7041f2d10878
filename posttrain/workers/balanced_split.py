"""Dynamic batch size cut as verl cuts it: a fixed number of micro-batches balanced by workload.

posttrain's own token-budget cut (`RolloutBatch.split_by_tokens`) packs rows longest first under the
budget. verl's (`rearrange_micro_batches`, used by its FSDP actor and critic, and so by Trinity-RFT)
instead takes n = min(rows, ceil(real tokens / budget)) micro-batches, the largest n over the
data-parallel ranks, and splits the rows into n groups whose summed workloads are balanced by the
largest differencing method of Karmarkar and Karp (1982), a row's workload being 24576 L + L^2 for
L real (prompt + response) tokens, verl's estimate of a 7B model's FLOPs. A group may then exceed the
budget: the budget sets how many groups there are, not their size.

With the default micro-batch weights (each micro-batch's share of the mini-batch's normaliser) the
gradient does not depend on the cut, so this only matters where the cut changes the loss: with
`micro_batch_weight: rows` (each micro-batch's own token mean, weighted by its rows), verl's legacy
workers and Trinity-RFT's default, whose numbers then need the same groups (`dynamic_bsz_partition:
balanced`).

The differencing method, as verl runs it: every row starts as a state of n sets (its own value in
the first, the others empty); the two states of largest spread (largest set sum minus smallest) are
merged, the largest set of one with the smallest of the other and so on, until one state is left.
Ties are broken as verl breaks them (sets by sum, then item count, then items; states by spread,
then largest set; the heap's order otherwise), so the groups are the same ones.
"""

from __future__ import annotations

import heapq
import math
from typing import Sequence

import torch

from posttrain.cluster.parallel import DataParallel
from posttrain.records import MicroBatches, RolloutBatch

# verl's workload estimate: 12 h^2 L + 2 h L^2 for h = 4096, divided by 2 h
LINEAR_WORKLOAD = 24576


def workload(length: int) -> int:
    """verl's workload of a row of `length` real tokens."""
    return LINEAR_WORKLOAD * length + length * length


class _Set:
    """One group of a partial partition: its items (row, value) in the order they joined, and their sum."""

    __slots__ = ("items", "total")

    def __init__(self) -> None:
        self.items: list[tuple[int, int]] = []
        self.total = 0

    def _key(self) -> tuple[int, int, list[tuple[int, int]]]:
        return self.total, len(self.items), self.items

    def __lt__(self, other: _Set) -> bool:
        return self._key() < other._key()

    def __gt__(self, other: _Set) -> bool:
        return other._key() < self._key()


class _State:
    """A partial partition into k sets, kept largest first; the heap pops the largest spread first."""

    __slots__ = ("sets",)

    def __init__(self, k: int, row: int, value: int) -> None:
        self.sets = [_Set() for _ in range(k)]
        self.sets[0].items.append((row, value))
        self.sets[0].total = value
        self.sets.sort(reverse=True)

    @property
    def spread(self) -> int:
        return self.sets[0].total - self.sets[-1].total

    def absorb(self, other: _State) -> None:
        """The largest set of this state takes the smallest of `other`, and so on."""
        k = len(self.sets)
        for i in range(k):
            mine, theirs = self.sets[i], other.sets[k - 1 - i]
            mine.items.extend(theirs.items)
            mine.total += theirs.total
        self.sets.sort(reverse=True)

    def __lt__(self, other: _State) -> bool:
        if self.spread != other.spread:
            return self.spread > other.spread
        return self.sets[0] > other.sets[0]


def karmarkar_karp(values: Sequence[int], k: int) -> list[list[int]]:
    """Indices of `values` in k groups of balanced sums (module docstring), each group ascending, the
    groups in the order of the final state (largest sum first)."""
    if not 1 <= k <= len(values):
        raise ValueError(f"{len(values)} items cannot be cut into {k} non-empty groups")
    heap: list[_State] = []
    for value, row in sorted((v, i) for i, v in enumerate(values)):
        heapq.heappush(heap, _State(k, row, value))
    while len(heap) > 1:
        first, second = heapq.heappop(heap), heapq.heappop(heap)
        first.absorb(second)
        heapq.heappush(heap, first)
    groups = [sorted(row for row, _ in s.items) for s in heap[0].sets]
    if any(not g for g in groups):
        raise ValueError(f"{len(values)} items left a group of {k} empty")
    return groups


def balanced_split(batch: RolloutBatch, max_tokens: int, dp: DataParallel = DataParallel()) -> MicroBatches:
    """`batch` (this rank's rows) cut as verl's dynamic batch size cuts it (module docstring), into
    the largest count any rank of `dp` needs: every rank calls it, one with no rows too (a collective)."""
    groups = verl_groups(batch.seq_lengths().tolist(), max_tokens, dp)
    index = torch.tensor([i for g in groups for i in g], dtype=torch.long)  # (B,)
    return MicroBatches([batch[g].trim() for g in groups], index)


def verl_groups(lengths: Sequence[int], max_tokens: int, dp: DataParallel = DataParallel()) -> list[list[int]]:
    """The rows (by index) of each of verl's micro-batches, in verl's order, for rows of `lengths`
    real tokens (`balanced_split`; the SFT/DPO stages' examples too, posttrain.trainer.sft)."""
    longest = max(lengths, default=0)
    if longest > max_tokens:
        raise ValueError(f"a sequence of {longest} tokens does not fit max_tokens={max_tokens}; "
                         "the token budget must be at least max prompt length + max response length")
    # the most any rank needs; a rank with fewer rows runs padding units instead (verl would stop)
    n = min(len(lengths), dp.max_count(math.ceil(sum(lengths) / max_tokens)))
    if n == 0:
        return []
    loads = [workload(length) for length in lengths]
    groups = karmarkar_karp(loads, n)
    # verl's order of the micro-batches (the heaviest in the middle): the same sums, added in the same order
    groups.sort(key=lambda g: (sum(loads[i] for i in g), g[0]), reverse=True)
    return groups[::2][::-1] + groups[1::2]
