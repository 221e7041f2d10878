"""Over-rollout (explorer.over_rollout): a deadline set by how many prompt groups have finished.

Trinity-RFT's explorer waits for ceil(batch_size x (1 - ratio)) of a step's tasks, then at most
`wait_after_min` seconds more, and cancels the tasks still running. posttrain's counterpart of a
task is a prompt group (a prompt's n adjacent rows): one engine call holds `G` groups, and once
ceil(G x (1 - ratio)) of them have every row finished (a stop or its length ended it), the call's
deadline becomes min(its own deadline, that moment + wait_s). The rows still decoding then end
there, flagged in RolloutBatch.over_rolled (posttrain.rollout.hf_engine).

One `GroupProgress` is shared by everything that decodes one engine call: the hf engine's decode
threads and its sequential max_num_seqs chunks, so a group finishing in one shard moves the deadline
of all of them (a chunk that starts after the deadline passed gets one token per row and ends).
Data-parallel rollout ranks each call their own engine on their own share of the prompts, so the
count is per rank: ceil(local groups x (1 - ratio)) (posttrain.workers.rollout gathers the rows,
flags included, so every rank sees which groups were cut).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class OverRollout:
    """What a generate call needs to know: the share of groups it may leave unfinished, and how long
    it waits once the others have finished (seconds). Plain values, so it pickles to any process."""

    ratio: float
    wait_s: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.ratio < 1.0 or self.wait_s <= 0:
            raise ValueError(f"over_rollout needs 0 <= ratio < 1 and wait_s > 0, got ratio={self.ratio}, wait_s={self.wait_s}")

    def required(self, groups: int) -> int:
        """Groups that must finish before the wait starts: ceil(groups x (1 - ratio)), as Trinity-RFT's
        explorer computes its min_wait_num; at least 1 for a call with any group.

        >>> OverRollout(0.25, 30).required(8), OverRollout(0.5, 30).required(3), OverRollout(0.9, 30).required(1)
        (6, 2, 1)
        """
        return math.ceil(groups * (1.0 - self.ratio))


class GroupProgress:
    """Thread-safe count of one engine call's finished groups, and the deadline it sets.

    >>> now = iter([10.0])
    >>> p = GroupProgress(["a", "a", "b", "b"], OverRollout(0.5, 3.0), lambda: next(now))
    >>> p.limit(None) is None
    True
    >>> p.rows_done(["a"]); p.limit(None) is None  # one row of group a: not a finished group
    True
    >>> p.rows_done(["a"]); p.limit(None), p.limit(12.0)  # a finished at 10: 1 of 2 groups, the wait starts
    (13.0, 12.0)
    """

    def __init__(self, groups: Iterable[str], over: OverRollout, clock: Callable[[], float]):
        self._left = Counter(groups)  # rows still decoding per group
        self._required = over.required(len(self._left))
        self._wait = over.wait_s
        self._clock = clock
        self._finished = 0
        self._lock = threading.Lock()
        self.cutoff: float | None = None  # the moment the required groups finished, plus the wait

    def rows_done(self, groups: Iterable[str]) -> None:
        """Rows (named by their group) that a stop or their length ended."""
        with self._lock:
            for g in groups:
                self._left[g] -= 1
                if self._left[g] == 0:
                    self._finished += 1
                    if self.cutoff is None and self._finished >= self._required:
                        self.cutoff = self._clock() + self._wait

    def limit(self, deadline: float | None) -> float | None:
        """When the call must stop decoding: the earlier of `deadline` (explorer.max_timeout) and the cutoff."""
        cutoff = self.cutoff
        if cutoff is None or (deadline is not None and deadline <= cutoff):
            return deadline
        return cutoff

    def cut_by_it(self, deadline: float | None) -> bool:
        """Whether a stop at `limit(deadline)` is over-rollout's (not the fixed deadline's)."""
        cutoff = self.cutoff
        return cutoff is not None and (deadline is None or cutoff < deadline)
