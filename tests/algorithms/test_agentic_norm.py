"""ROLL's agentic reward normalisation, with hand-computed expectations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from posttrain.algorithms import agentic_reward_norm
from posttrain.config import load_config
from posttrain.config.dialects import read_foreign
from posttrain.config.sections.algorithm import AgenticRewardNormConfig
from posttrain.errors import ConfigError
from posttrain.records import RolloutBatch
from posttrain.trainer.advantages import agentic_scores

REFERENCE = Path(__file__).resolve().parents[1] / "config" / "reference_configs"


def test_methods_within_groups():
    """Groups a = (1, 3), b = (5, 5, 8): means 2 and 6, unbiased stds sqrt(2) and sqrt(3)."""
    s, g = torch.tensor([1.0, 3.0, 5.0, 5.0, 8.0]), ["a", "a", "b", "b", "b"]
    assert agentic_reward_norm(s, g, "identity").tolist() == [1.0, 3.0, 5.0, 5.0, 8.0]
    assert agentic_reward_norm(s, g, "mean").tolist() == pytest.approx([-1.0, 1.0, -1.0, -1.0, 2.0])
    expected = [-1 / 2**0.5, 1 / 2**0.5, -1 / 3**0.5, -1 / 3**0.5, 2 / 3**0.5]
    assert agentic_reward_norm(s, g, "mean_std").tolist() == pytest.approx(expected, abs=1e-5)
    assert agentic_reward_norm(s, g, "asym_clip").tolist() == pytest.approx(expected, abs=1e-5)  # ROLL: the same statistics


def test_batch_grouping_and_groups_without_signal_give_zero():
    s = torch.tensor([1.0, 3.0, 2.0, 2.0, 7.0])
    assert agentic_reward_norm(s, None, "mean").tolist() == pytest.approx([-2.0, 0.0, -1.0, -1.0, 4.0])
    out = agentic_reward_norm(s, ["a", "a", "b", "b", "c"], "mean_std")
    assert out[2:].tolist() == [0.0, 0.0, 0.0]  # equal scores, and a group of one


def _batch(scores_groups, tags):
    n = len(tags)
    return RolloutBatch(
        prompt_ids=torch.ones(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1), response_ids=torch.ones(n, 1, dtype=torch.long),
        response_mask=torch.ones(n, 1), rollout_logprobs=torch.zeros(n, 1), weights_version=torch.zeros(n, dtype=torch.long),
        group_index=scores_groups, data_source=tags, ground_truth=[None] * n, extra_info=[{}] * n, raw_prompt=[""] * n,
    )


def test_grouping_picks_the_environment_group_the_tag_or_the_batch():
    scores, batch = torch.tensor([0.0, 2.0, 4.0, 10.0]), _batch(["g0", "g0", "g1", "g1"], ["maze", "grid", "maze", "grid"])
    norm = lambda grouping: AgenticRewardNormConfig(grouping=grouping, method="mean")  # noqa: E731
    assert agentic_scores(scores, batch, norm("traj_group_id")).tolist() == [-1.0, 1.0, -3.0, 3.0]
    assert agentic_scores(scores, batch, norm("tags")).tolist() == [-2.0, -4.0, 2.0, 4.0]
    assert agentic_scores(scores, batch, norm("batch")).tolist() == [-4.0, -2.0, 0.0, 6.0]


def test_a_stage_without_environments_refuses_it():
    with pytest.raises(ConfigError, match="agentic_reward_norm \\(method mean_std, grouping batch\\) normalises the trajectory scores"):
        load_config(None, ["algorithm.agentic_reward_norm.method=mean_std"])


def test_explicit_mean_and_std_scopes_override_the_method():
    """ROLL's norm_mean_type / norm_std_type: scores (1, 3 | 5, 5, 8), batch mean 4.4, batch std
    sqrt(27.2 / 4) = 2.6077 (unbiased); group means 2 and 6, group stds sqrt(2) and sqrt(3)."""
    s, g = torch.tensor([1.0, 3.0, 5.0, 5.0, 8.0]), ["a", "a", "b", "b", "b"]
    bstd = 6.8**0.5
    group_mean_batch_std = agentic_reward_norm(s, g, "identity", "group", "batch")
    assert group_mean_batch_std.tolist() == pytest.approx([-1 / bstd, 1 / bstd, -1 / bstd, -1 / bstd, 2 / bstd], abs=1e-5)
    assert agentic_reward_norm(s, g, "mean", "batch").tolist() == pytest.approx([-3.4, -1.4, 0.6, 0.6, 3.6], abs=1e-5)
    std_only = agentic_reward_norm(s, g, "identity", None, "group")  # divides the raw scores
    assert std_only.tolist() == pytest.approx([1 / 2**0.5, 3 / 2**0.5, 5 / 3**0.5, 5 / 3**0.5, 8 / 3**0.5], abs=1e-5)
    # null scopes come from the method: mean_std within groups is group mean and group std
    assert agentic_reward_norm(s, g, "mean_std", None, None).tolist() == agentic_reward_norm(s, g, "mean_std", "group", "group").tolist()


def test_the_scope_keys_reach_the_scores_and_a_roll_file_sets_them(tmp_path):
    roll = yaml.safe_load((REFERENCE / "roll_qwen2.5-0.5B-agentic_agentic_val_sokoban.yaml").read_text())
    roll["reward_normalization"] = {"grouping": "traj_group_id", "norm_mean_type": "group", "norm_std_type": "batch"}
    (tmp_path / "roll.yaml").write_text(yaml.safe_dump(roll))
    report = read_foreign(tmp_path / "roll.yaml").report
    for key in ("norm_mean_type", "norm_std_type"):
        entry = report.entry(f"reward_normalization.{key}")
        assert (entry.status, entry.native) == ("translated", f"algorithm.agentic_reward_norm.{key}")
    scores, batch = torch.tensor([0.0, 2.0, 4.0, 10.0]), _batch(["g0", "g0", "g1", "g1"], ["maze", "grid", "maze", "grid"])
    by_group = AgenticRewardNormConfig(grouping="traj_group_id", method="identity", norm_mean_type="group")
    by_batch = AgenticRewardNormConfig(grouping="traj_group_id", method="identity", norm_mean_type="batch")
    assert agentic_scores(scores, batch, by_group).tolist() == [-1.0, 1.0, -3.0, 3.0]
    assert agentic_scores(scores, batch, by_batch).tolist() == [-4.0, -2.0, 0.0, 6.0]
