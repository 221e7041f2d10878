"""verl's cut of a dynamic batch (posttrain.workers.balanced_split): the differencing method's groups,
their count, and the actor's rows-weighted gradient over them."""

from __future__ import annotations

import math

import pytest

from posttrain.workers.balanced_split import balanced_split, karmarkar_karp, workload
from test_actor import B, LOSS_TERMS, grads_after_update, prepared_batch
from worker_helpers import assert_same_grads


def test_differencing_by_hand():
    # [1, 2, 3, 4] in two: 4 and 3 differenced to {4 | 3}, then 2 against it to {2, 3 | 4}, then 1: {2, 3 | 4, 1}
    assert karmarkar_karp([1, 2, 3, 4], 2) == [[0, 3], [1, 2]]
    # the largest sets first; a tie of sums goes to the set with more items, then the larger items
    assert karmarkar_karp([5, 5, 5, 1], 3) == [[0, 3], [2], [1]]
    values = [8, 7, 6, 5, 4]
    # a heuristic: differences 8-7, 6-5, then 4-1-1 leave 2 apart, where {8, 7} | {6, 5, 4} would leave 0 (verl's too)
    assert sorted(sum(values[i] for i in g) for g in karmarkar_karp(values, 2)) == [14, 16]
    with pytest.raises(ValueError, match="cannot be cut into 3"):
        karmarkar_karp([1, 2], 3)


def test_the_count_is_the_tokens_over_the_budget_and_every_row_is_in_one_group(policy):
    batch = prepared_batch(policy)
    lengths = batch.seq_lengths().tolist()  # [8, 7, 9, 5, 7, 9, 6]
    for budget in (9, 12, 20, 60):
        cut = balanced_split(batch, budget)
        assert len(cut.batches) == min(B, math.ceil(sum(lengths) / budget))
        assert sorted(cut.index.tolist()) == list(range(B))
    cut = balanced_split(batch, 12)
    groups = sorted(sorted(lengths[i] for i in g) for g in _groups(cut))
    assert groups == [[5, 7], [6, 7], [8], [9], [9]]  # 5 groups: workloads 24576 L + L^2 balanced
    assert workload(9) == 24576 * 9 + 81
    with pytest.raises(ValueError, match="a sequence of 9 tokens does not fit max_tokens=8"):
        balanced_split(batch, 8)


def _groups(cut):
    out, start = [], 0
    for part in cut.batches:
        out.append(cut.index[start : start + len(part)].tolist())
        start += len(part)
    return out


def test_rows_weighting_over_verl_s_groups(policy):
    """micro_batch_weight rows with the balanced cut: sum over verl's groups of rows_g / B x the
    gradient of the group's own token-mean loss; posttrain's packing gives other groups, so another gradient."""
    batch = prepared_batch(policy)
    common = dict(loss_agg_mode="token-mean", by_rows=True, max_tokens_per_micro_batch=12, **LOSS_TERMS)
    expected = None
    for rows in _groups(balanced_split(batch, 12)):
        alone, _ = grads_after_update(policy, batch[rows], mini_batch_size=len(rows), micro_batch_size=len(rows),
                                      **{k: v for k, v in common.items() if k not in ("by_rows", "max_tokens_per_micro_batch")})
        part = {k: v * len(rows) / B for k, v in alone.items()}
        expected = part if expected is None else {k: expected[k] + part[k] for k in part}
    got, _ = grads_after_update(policy, batch, balanced=True, **common)
    assert_same_grads(expected, got)
    packed, _ = grads_after_update(policy, batch, **common)
    with pytest.raises(AssertionError):
        assert_same_grads(packed, got)
    # with the normaliser weights the cut changes nothing
    tokens = {k: v for k, v in common.items() if k != "by_rows"}
    assert_same_grads(grads_after_update(policy, batch, balanced=True, **tokens)[0], grads_after_update(policy, batch, **tokens)[0])


def test_the_cut_without_dynamic_batch_size_is_refused():
    from posttrain.config.load import load_config
    from posttrain.errors import ConfigError

    base = ["model.path=/m", "data.train_files=/d.parquet"]
    with pytest.raises(ConfigError, match="actor.dynamic_bsz_partition balanced: cuts the actor's micro-batches by a token budget"):
        load_config(None, [*base, "actor.dynamic_bsz_partition=balanced"])
    cfg = load_config(None, [*base, "actor.dynamic_bsz_partition=balanced", "actor.use_dynamic_bsz=true", "algorithm.kind=sft",
                             "data.max_length=64"])
    assert cfg.actor.dynamic_bsz_partition == "balanced"  # SFT stages cut their examples so too
