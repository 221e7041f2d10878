"""ROLL's per-sample loss controls, with hand-computed expectations."""

from __future__ import annotations

import pytest
import torch

from posttrain.algorithms import sample_keep_mask, sample_loss_weights
from posttrain.errors import DataError
from posttrain.workers.actor_loss import difficulty_of


def test_max_len_mask_drops_responses_at_the_budget():
    keep, metrics = sample_keep_mask(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([3, 8, 7]), 8, ["a", "a", "b"], max_len_mask=True)
    assert keep.tolist() == [1.0, 0.0, 1.0] and metrics["actor/max_len_mask_ratio"] == pytest.approx(2 / 3)


def test_difficulty_mask_keeps_groups_whose_mean_is_strictly_inside_the_thresholds():
    """Group means 1.0, 0.5 and 0.0 against (0.1, 0.95): only the middle group stays."""
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    keep, metrics = sample_keep_mask(scores, torch.ones(6), 8, ["a", "a", "b", "b", "c", "c"], difficulty_mask=True)
    assert keep.tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0] and metrics["actor/final_mask_ratio"] == pytest.approx(1 / 3)
    keep, _ = sample_keep_mask(scores, torch.ones(6), 8, ["a", "a", "b", "b", "c", "c"], difficulty_mask=True, low=-1.0, high=0.5)
    assert keep.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]  # 0.5 is not strictly below 0.5


def test_error_max_len_clip_keeps_right_answers_and_short_wrong_ones():
    scores, lengths = torch.tensor([1.0, 0.0, 0.0, 0.5]), torch.tensor([9, 3, 9, 2])
    keep, _ = sample_keep_mask(scores, lengths, 10, ["a"] * 4, error_max_len_clip=True, error_threshold=5)
    assert keep.tolist() == [1.0, 1.0, 0.0, 0.0]  # a score that is neither 0 nor 1 is dropped, as ROLL does


def test_filters_multiply_and_nothing_on_means_no_mask_metrics():
    keep, metrics = sample_keep_mask(torch.tensor([1.0, 0.0]), torch.tensor([8, 2]), 8, ["a", "a"])
    assert keep.tolist() == [1.0, 1.0] and metrics == {}
    keep, _ = sample_keep_mask(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([2, 2, 8, 2]), 8, ["a", "a", "b", "b"],
                               max_len_mask=True, difficulty_mask=True)
    assert keep.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_loss_weights_follow_roll_and_average_one():
    """Lengths 2, 4, 6: length weights 1.5, 1.0, 0.5; difficulties 0, 1, 0.5: 0.5, 2.0, 1.25. The
    products 0.75, 2.0, 0.625 (sum 3.375) are rescaled by 3 / 3.375."""
    mask = torch.tensor([[1.0] * 2 + [0.0] * 4, [1.0] * 4 + [0.0] * 2, [1.0] * 6])
    assert sample_loss_weights(mask, None, True).tolist() == pytest.approx([1.5, 1.0, 0.5])
    got = sample_loss_weights(mask, torch.tensor([0.0, 1.0, 0.5]), True)
    assert got.tolist() == pytest.approx([0.75 / 1.125, 2.0 / 1.125, 0.625 / 1.125], abs=1e-6)
    assert sample_loss_weights(mask, torch.tensor([3.0, -1.0, 0.0]), False).tolist() == pytest.approx([2.0 * 3 / 3, 0.5, 0.5])


def test_a_row_without_a_numeric_difficulty_is_named():
    assert difficulty_of([{"difficulty": 0.25}, {"difficulty": 1}], ["a", "b"]).tolist() == [0.25, 1.0]
    with pytest.raises(DataError, match="data source 'math' has extra_info.difficulty 'hard'"):
        difficulty_of([{"difficulty": "hard"}], ["math"])


def test_overlong_penalty_ramps_over_the_last_tokens_of_the_budget():
    """Budget 10, ramp 4, factor 2: free up to 6 tokens, then -0.5 per token down to -2 at 10."""
    from posttrain.algorithms import overlong_penalty
    from posttrain.config import load_config
    from posttrain.errors import ConfigError

    assert overlong_penalty(torch.tensor([3, 6, 7, 9, 10]), 10, 4, 2.0).tolist() == pytest.approx([0.0, 0.0, -0.5, -1.5, -2.0])
    with pytest.raises(ConfigError, match="overlong_buffer.len \\(0\\) must be between 1 and the response length"):
        load_config(None, ["reward.overlong_buffer.enable=true"])


def test_min_score_and_valid_keep_raft_s_successes():
    """RAFT keeps the episodes scored at least 1 whose every action was well formed: of scores 1, 1, 0, 2
    with the second episode holding a malformed action, the first and the last stay."""
    scores, valid = torch.tensor([1.0, 1.0, 0.0, 2.0]), torch.tensor([True, False, True, True])
    keep, metrics = sample_keep_mask(scores, torch.ones(4), 8, ["a"] * 4, min_score=1.0, valid=valid)
    assert keep.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert (metrics["actor/min_score_mask_ratio"], metrics["actor/valid_actions_mask_ratio"]) == (0.75, 0.75)
    assert metrics["actor/final_mask_ratio"] == 0.5
    assert sample_keep_mask(scores, torch.ones(4), 8, ["a"] * 4, min_score=1.5)[0].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_valid_actions_mask_leaves_episodes_with_a_malformed_action_out_of_the_losses():
    from types import SimpleNamespace

    from posttrain.config.sections.algorithm import AlgorithmConfig
    from posttrain.trainer.advantages import mask_samples

    def batch(extra_info):
        mask = torch.ones(3, 4)
        return SimpleNamespace(response_mask=mask, train_mask=mask, loss_mask=mask, group_index=["g"] * 3, extra_info=extra_info)

    rows = batch([{"invalid_actions": 0}, {"invalid_actions": 2}, {"invalid_actions": 0}])
    metrics = mask_samples(rows, torch.tensor([1.0, 1.0, 0.0]), AlgorithmConfig(valid_actions_mask=True, min_score_mask=1.0), 4)
    assert rows.loss_mask.sum(-1).tolist() == [4.0, 0.0, 0.0] and metrics["actor/final_mask_ratio"] == pytest.approx(1 / 3)
    rows = batch([{"invalid_actions": 0}, {"invalid_actions": 2}, {"invalid_actions": 0}])
    mask_samples(rows, torch.tensor([1.0, 1.0, 0.0]), AlgorithmConfig(), 4)  # off: every row trains
    assert rows.loss_mask.sum(-1).tolist() == [4.0, 4.0, 4.0]
    with pytest.raises(ValueError, match="algorithm.valid_actions_mask: a row has no actions of an environment"):
        mask_samples(batch([{}] * 3), torch.zeros(3), AlgorithmConfig(valid_actions_mask=True), 4)
