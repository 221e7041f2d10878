"""Dropping prompt groups whose rewards carry no signal (a reward worker's ``query_filter_config``).

A GRPO-style group whose responses all score alike has zero advantage everywhere: it costs a
forward and backward pass and teaches nothing. A reward worker may name a filter for the groups of
its tags (ROLL's ``query_filter_config``); each group of ``rollout.n`` responses to one prompt is
judged on its responses' rewards r_1..r_n (the summed reward of every worker that scores the tag):

- ``no_filter``: every group is kept;
- ``mean_filter``: dropped when mean(r) <= ``threshold_down`` (default -1) or mean(r) >=
  ``threshold_up`` (default +inf): all wrong or all right, for a 0/1 reward with thresholds 0 and 1;
- ``std_filter``: dropped when std(r) <= ``std_threshold`` (default -1: nothing dropped), std with
  Bessel's correction (n - 1), as ROLL's ``torch.std``.

A group of one response is always kept (it has no spread to judge), as ROLL does. Where several
workers claim a tag, a group is dropped when any of their filters drops it. Validation batches are
never filtered. Deviation from ROLL: ROLL generates more prompts until the batch is full again;
posttrain trains on the groups kept (a smaller batch), and skips the step's updates when none is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

@dataclass(frozen=True)
class GroupFilter:
    """One worker's filter: its kind and thresholds (the module docstring gives the defaults)."""

    kind: str = "no_filter"
    threshold_up: float = math.inf
    threshold_down: float = -1.0
    std_threshold: float = -1.0

    @classmethod
    def from_config(cls, kind: str, args: Mapping[str, Any]) -> GroupFilter:
        return cls(kind, **{k: float(v) for k, v in args.items()})

    def keeps(self, rewards: torch.Tensor) -> bool:
        """Whether a group with these rewards (n,) trains.

        >>> f = GroupFilter("mean_filter", threshold_up=1.0, threshold_down=0.0)
        >>> [f.keeps(torch.tensor(r)) for r in ([0.0, 0.0], [0.0, 1.0], [1.0, 1.0])]
        [False, True, False]
        >>> GroupFilter("std_filter", std_threshold=0.0).keeps(torch.tensor([0.5, 0.5, 0.5]))
        False
        """
        if self.kind == "no_filter" or rewards.numel() < 2:
            return True
        if self.kind == "mean_filter":
            return self.threshold_down < float(rewards.mean()) < self.threshold_up  # a mean on a bound drops
        return float(rewards.std()) > self.std_threshold  # unbiased (n - 1), as torch.std


def filter_groups(
    group_index: list[str], tags: list[str], scores: torch.Tensor, filters: dict[str, list[tuple[str, GroupFilter]]]
) -> tuple[list[int], dict[str, float]]:
    """The rows whose group every filter of its tag keeps, in order, and the counts of groups.

    ``filters``: tag -> [(worker name, filter)] of the workers that claim it (tags absent: kept).
    Metrics: ``query_filter/groups`` judged, ``query_filter/dropped_groups``, ``query_filter/kept_frac``,
    and ``query_filter/<worker>/dropped`` per worker with a filter.

    >>> f = {"t": [("w", GroupFilter("std_filter", std_threshold=0.0))]}
    >>> filter_groups(["a", "a", "b", "b"], ["t"] * 4, torch.tensor([1.0, 1.0, 0.0, 1.0]), f)[0]
    [2, 3]
    """
    rows_of: dict[str, list[int]] = {}
    for row, uid in enumerate(group_index):
        rows_of.setdefault(uid, []).append(row)
    dropped_by = {name: 0 for pairs in filters.values() for name, f in pairs if f.kind != "no_filter"}
    kept: list[int] = []
    dropped = 0
    for rows in rows_of.values():
        rewards = scores[rows].float()  # (n,) this group's rewards
        refusing = [name for name, f in filters.get(tags[rows[0]], []) if not f.keeps(rewards)]
        for name in refusing:
            dropped_by[name] += 1
        if refusing:
            dropped += 1
        else:
            kept.extend(rows)
    groups = len(rows_of)
    metrics = {"query_filter/groups": float(groups), "query_filter/dropped_groups": float(dropped),
               "query_filter/kept_frac": (groups - dropped) / groups if groups else 1.0}
    metrics.update({f"query_filter/{name}/dropped": float(n) for name, n in dropped_by.items()})
    return sorted(kept), metrics
