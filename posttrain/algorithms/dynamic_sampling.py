"""DAPO's dynamic sampling: which prompt groups carry a learning signal (`informative_groups`).

A group (the responses to one prompt, sharing a uid) whose responses all have the same value of the
chosen metric has zero group-relative advantage: it costs a forward and backward pass and teaches
nothing. DAPO drops such groups and samples more prompts until the batch is full again
(posttrain.trainer.dynamic_sampling runs the rounds).
"""

from __future__ import annotations

from typing import Sequence

import torch


def informative_groups(group_index: Sequence[str], values: torch.Tensor, std_threshold: float | None = None) -> list[str]:
    """The uids whose responses' metric `values` (B,) are not all equal (or that have one
    response), in the order each uid first appears: DAPO's dynamic-sampling filter. With
    `std_threshold`, the uids of groups of two or more whose metric's std exceeds it (Trinity-RFT).

    Formula:
        keep(g) = |g| == 1  or  max_{i in g} m_i > min_{i in g} m_i          (std_threshold None)
        keep(g) = |g| >= 2  and  std_{i in g}(m_i) > std_threshold           (otherwise; unbiased std)
        for per-response metric values m (B,). Over generation rounds the kept groups accumulate in
        the order generated, and the first data.train_batch_size of them train; the rest are discarded.
    Names:
        verl `algorithm.filter_groups.{enable, metric, max_num_gen_batches}` (recipe/dapo's trainer);
        Trinity-RFT `advantage_fn_args.std_threshold` of `grpo` / `step_wise_grpo`, which drops such
        groups (and groups of one) before the experience buffer, whose reader waits until a full
        train_batch_size of the rest has arrived.
    Paper:
        DAPO: Yu et al. 2025, arXiv:2503.14476, section 3.2 (dynamic sampling).
    Deviation:
        verl keeps a group when `np.std(m) > 0`; comparing max and min is the same test without float
        round-off (np.std of three equal values 0.1 is ~1.4e-17, not 0, so verl would keep that group).
    """
    if len(group_index) != values.numel():
        raise ValueError(f"{len(group_index)} group ids for {values.numel()} metric values")
    rows_of: dict[str, list[int]] = {}
    for row, uid in enumerate(group_index):
        rows_of.setdefault(uid, []).append(row)
    kept = []
    for uid, rows in rows_of.items():
        group = values[rows]  # (n,) this group's metric values
        if std_threshold is not None:  # Trinity: a group of one has no spread, so it is dropped too
            if len(rows) >= 2 and float(group.double().std()) > std_threshold:
                kept.append(uid)
        elif len(rows) == 1 or bool(group.max() > group.min()):
            kept.append(uid)
    return kept


def rows_of_groups(group_index: Sequence[str], uids: Sequence[str]) -> list[int]:
    """The rows (in batch order) whose uid is one of `uids`.

    >>> rows_of_groups(["a", "a", "b", "b", "c"], ["c", "a"])
    [0, 1, 4]
    """
    wanted = set(uids)
    return [row for row, uid in enumerate(group_index) if uid in wanted]
