"""Mini/micro-batch cutting and the weights that make gradient accumulation exact."""

from __future__ import annotations

import pytest
import torch

from posttrain.algorithms import aggregate_loss
from posttrain.cluster.parallel import DataParallel
from posttrain.workers.microbatch import (
    accumulate_units,
    forward_in_order,
    loss_weight,
    micro_batches,
    micro_weight,
    mini_batches,
    normaliser,
)
from worker_helpers import LENGTHS, make_batch

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # 4 tokens, 2 non-empty rows


def test_normaliser_counts_tokens_or_non_empty_sequences():
    assert normaliser(MASK, "token-mean") == normaliser(MASK, "token-sum") == 4.0
    for mode in ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert normaliser(MASK, mode) == 2.0


def test_micro_weights_are_shares_of_the_mini_batch():
    assert micro_weight(MASK[:1], 4.0, "token-mean") == 0.75
    assert micro_weight(MASK[1:], 4.0, "token-mean") == 0.25
    assert micro_weight(MASK[:1], 2.0, "seq-mean-token-mean") == 0.5
    assert micro_weight(MASK[2:], 2.0, "seq-mean-token-mean") == 0.0  # an all-padding row weighs nothing
    assert micro_weight(MASK[2:], 0.0, "token-mean") == 0.0  # an empty mini-batch, no division by zero


def test_token_sum_losses_add_up_unweighted_and_other_modes_by_their_share():
    assert loss_weight(0.25, "token-sum") == 1.0
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert loss_weight(0.25, mode) == 0.25


@pytest.mark.parametrize("mode", ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_weighted_micro_losses_add_up_to_the_mini_batch_loss(mode):
    g = torch.Generator().manual_seed(0)
    loss_mat = torch.randn(3, 3, generator=g)
    full = aggregate_loss(loss_mat, MASK, mode, loss_scale_factor=4.0)
    total = normaliser(MASK, mode)
    parts = sum(
        loss_weight(micro_weight(MASK[i : i + 1], total, mode), mode)
        * aggregate_loss(loss_mat[i : i + 1], MASK[i : i + 1], mode, loss_scale_factor=4.0)
        for i in range(3)
    )
    assert float(parts) == pytest.approx(float(full), rel=1e-6)


def test_mini_batches_cover_every_row_once():
    batch = make_batch(50)
    plain = mini_batches(batch, 3, shuffle=False, generator=None)
    assert [len(m) for m in plain] == [3, 3, 1]
    assert torch.equal(torch.cat([m.response_ids for m in plain]), batch.response_ids)
    g = torch.Generator().manual_seed(0)
    first, second = (mini_batches(batch, 7, shuffle=True, generator=g)[0] for _ in range(2))
    assert sorted(first.group_index) == sorted(batch.group_index)
    assert first.response_ids.tolist() != second.response_ids.tolist()  # a fresh permutation per call


def test_micro_batches_trim_and_respect_the_token_budget():
    batch = make_batch(50)
    by_rows = micro_batches(batch, size=2, max_tokens=None)
    assert [len(m) for m in by_rows] == [2, 2, 2, 1]
    assert by_rows[-1].response_ids.shape[1] == LENGTHS[-1][1]  # trimmed to its own width
    packed = micro_batches(batch, size=None, max_tokens=12)
    assert sum(len(m) for m in packed) == len(batch)
    for m in packed:
        assert len(m) * (m.prompt_ids.shape[1] + m.response_ids.shape[1]) <= 12
    assert len(micro_batches(batch, size=None, max_tokens=None)) == 1


@pytest.mark.parametrize("cut", [dict(size=7, max_tokens=None), dict(size=2, max_tokens=None), dict(size=None, max_tokens=20)])
def test_forward_in_order_puts_every_row_back_at_full_width(cut):
    """Trimmed and token-packed (reordered) micro-batches come back in the batch's row order."""
    batch = make_batch(vocab=50)
    seen_widths = []

    def row_tagged(micro):  # each token's value: its response id, so misplaced rows are visible
        seen_widths.append(micro.response_ids.shape[1])
        return micro.response_ids.float() * micro.response_mask

    out = forward_in_order(batch, row_tagged, **cut)
    torch.testing.assert_close(out, batch.response_ids.float() * batch.response_mask)
    if cut["size"] != 7:
        assert min(seen_widths) < batch.response_ids.shape[1]  # micro-batches really were trimmed


class BusierPeer(DataParallel):
    """One process that behaves as if another rank had two more micro-batches than this one."""

    def max_count(self, count: int) -> int:
        return count + 2


def test_accumulate_units_adds_weighted_units_and_padding_adds_keys_but_nothing_else():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    xs = [torch.tensor([3.0, 0.0]), torch.tensor([0.0, 5.0])]
    calls = []

    def weighted(x):
        calls.append(x)
        loss = (w * x).sum() * 0.5  # each unit is half of the batch
        return loss, {"loss": float(loss.detach()), f"seen/{len(calls)}": 1.0}

    metrics = accumulate_units(xs, lambda: torch.tensor([7.0, 7.0]), weighted, dp=BusierPeer())
    assert len(calls) == 4  # two real units, two padding units that still run (a sharded forward is a collective)
    assert w.grad.tolist() == [1.5, 2.5]  # 0.5 x (3, 0) + 0.5 x (0, 5); the padding's (7, 7) adds exactly 0
    assert metrics == {"loss": 0.5 * 3.0 * 1.0 + 0.5 * 5.0 * 2.0, "seen/1": 1.0, "seen/2": 1.0, "seen/3": 0.0, "seen/4": 0.0}

    w.grad = None
    assert accumulate_units(xs, lambda: xs[0], weighted, backward=False)["loss"] == 6.5
    assert w.grad is None  # evaluation: no backward
