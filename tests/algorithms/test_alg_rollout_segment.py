"""Rollout correction per segment (each run of trained tokens: one model turn of an agentic
trajectory whose env tokens are masked) and by the probability difference, ROLL's
train_infer_correction levels, against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algorithms import rollout_importance_weights, rollout_rejection, rs_thresholds
from posttrain.algorithms.masked import masked_segment_mean

# One trajectory of three model turns: tokens 0-1, 3 and 5-6; 2 and 4 are env tokens, 7 is padding.
MASK = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]])
# log pi_old - log pi_rollout; the masked entries are large so that counting them would show.
DIFF = torch.tensor([[0.2, -0.4, 5.0, 0.3, 7.0, 0.3, -0.1, 9.0]])
ROLLOUT = torch.full_like(DIFF, -1.0)
OLD = ROLLOUT + DIFF
SEGMENT_MEANS = [-0.1, -0.1, 0.0, 0.3, 0.0, 0.1, 0.1, 0.0]  # (0.2 - 0.4) / 2, 0.3, (0.3 - 0.1) / 2


def test_segment_mean_averages_each_run_of_mask_ones_on_its_own():
    torch.testing.assert_close(masked_segment_mean(DIFF, MASK), torch.tensor([SEGMENT_MEANS]))
    # a run at the very start and one reaching the end; an empty row stays 0
    values = torch.tensor([[4.0, 2.0, 1.0, 6.0], [1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0]])
    torch.testing.assert_close(masked_segment_mean(values, mask), torch.tensor([[4.0, 0.0, 3.5, 3.5], [0.0, 0.0, 0.0, 0.0]]))


def test_segment_weights_share_the_turns_geometric_mean_ratio():
    truncated = rollout_importance_weights(OLD, ROLLOUT, MASK, threshold=1.2, level="segment")
    e = math.exp
    want = torch.tensor([[e(-0.1), e(-0.1), 0.0, 1.2, 0.0, e(0.1), e(0.1), 0.0]])  # exp(0.3) = 1.35 capped
    torch.testing.assert_close(truncated.weights, want)
    assert torch.equal(truncated.keep, MASK)
    # mask mode: the middle turn's ratio 1.35 is above 1.2, so that whole turn leaves; others stay
    masked = rollout_importance_weights(OLD, ROLLOUT, MASK, threshold=1.2, threshold_lower=0.8, level="segment", mode="mask")
    assert masked.keep.tolist() == [[1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]]
    assert masked.metrics["rollout_is/fraction_high"] == pytest.approx(1 / 5)  # counted per token
    token = rollout_importance_weights(OLD, ROLLOUT, MASK, threshold=1.2, threshold_lower=0.8, mode="mask")
    assert token.keep.tolist() == [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]]  # per token only exp(-0.1) is in [0.8, 1.2]


def test_seg_mean_k1_rejects_whole_turns_whose_mean_log_ratio_is_out_of_bounds():
    keep, m = rollout_rejection(OLD, ROLLOUT, MASK, options="seg_mean_k1", threshold="0.8_1.25")
    # segment means of k1 = -r: 0.1, -0.3, -0.1 against [log 0.8, log 1.25] = [-0.223, 0.223]
    assert keep.tolist() == [[1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]]
    assert m["rollout_rs/seg_mean_k1_masked_fraction"] == pytest.approx(1 / 5)
    token, _ = rollout_rejection(OLD, ROLLOUT, MASK, options="token_k1", threshold="0.8_1.25")
    assert token.tolist() == [[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]]
    k2, _ = rollout_rejection(OLD, ROLLOUT, MASK, options="seg_mean_k2", threshold=0.03)
    # segment means of r^2 / 2: (0.02 + 0.08) / 2 = 0.05 out, 0.045 out, (0.045 + 0.005) / 2 = 0.025 in
    assert k2.tolist() == [[0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]]


def test_diff_options_bound_the_probability_difference_at_each_level():
    p_rollout = torch.tensor([[0.5, 0.5, 0.5, 0.4, 0.5, 0.2, 0.9, 0.5]])
    p_old = torch.tensor([[0.6, 0.3, 0.1, 0.6, 0.9, 0.25, 0.95, 0.1]])  # diffs 0.1, -0.2, (env), 0.2, (env), 0.05, 0.05
    old, rollout = p_old.log(), p_rollout.log()

    def keep(option, threshold="-0.15_0.15"):
        return rollout_rejection(old, rollout, MASK, options=option, threshold=threshold)[0].tolist()

    assert keep("token_diff") == [[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]]
    assert keep("seg_mean_diff") == [[1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]]  # turn means -0.05, 0.2, 0.05
    assert keep("seq_mean_diff") == MASK.tolist()  # 0.2 / 5 = 0.04
    assert keep("seq_sum_diff") == [[0.0] * 8]  # 0.2 > 0.15
    assert keep("seq_sum_diff", 0.25) == MASK.tolist()  # one number U: [-U, U]
    assert keep("seg_mean_diff", "0.1_0.3") == [[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]]  # a one-sided band


def test_diff_thresholds_may_be_negative_but_ordered():
    assert rs_thresholds("seg_mean_diff,token_diff", "-0.1_0.1,0.2") == {"seg_mean_diff": (-0.1, 0.1), "token_diff": (-0.2, 0.2)}
    assert rs_thresholds("seg_mean_k1", "0.8_1.05") == {"seg_mean_k1": (0.8, 1.05)}
    with pytest.raises(ValueError, match="lower <= upper"):
        rs_thresholds("token_diff", "0.1_-0.1")
    with pytest.raises(ValueError, match="unknown rejection option"):
        rs_thresholds("seq_max_diff", 0.1)
