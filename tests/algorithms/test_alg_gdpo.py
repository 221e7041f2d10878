"""GDPO (verl's adv_estimator=gdpo) on hand-computed numbers: each reward component normalised in its
group, the weighted sum, then whitened over the batch's tokens; and how a run fills its components."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace

import pytest
import torch

from posttrain.algorithms import gdpo_advantage, get_advantage_estimator
from posttrain.config.checks_losses import check_gdpo
from posttrain.errors import UserError
from posttrain.trainer.rewarding import reward_components

# Two groups of two responses; lengths 2, 3, 1, 2 tokens.
GROUPS = ["a", "a", "b", "b"]
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
# accuracy separates the responses of group a only; format is large and separates those of group b
COMPONENTS = torch.tensor([[1.0, 10.0], [0.0, 10.0], [1.0, 30.0], [1.0, 20.0]])


def _grpo(values: list[float], eps: float = 1e-6) -> list[float]:
    out = []
    for g in dict.fromkeys(GROUPS):
        members = [v for v, h in zip(values, GROUPS) if h == g]
        mean, std = statistics.mean(members), statistics.stdev(members)
        out += [(v - mean) / (std + eps) for v in members]
    return out


def test_each_component_is_normalised_in_its_group_then_summed_and_whitened():
    weights = [1.0, 0.5]
    got = gdpo_advantage(token_level_rewards=torch.zeros(4, 3), response_mask=MASK, group_index=GROUPS,
                         reward_components=COMPONENTS, reward_weights=weights)
    acc, fmt = _grpo(COMPONENTS[:, 0].tolist()), _grpo(COMPONENTS[:, 1].tolist())
    # group b's accuracy is uniform: 0; group a's format is uniform: 0; the rest is +-1/sqrt(2)
    summed = [weights[0] * a + weights[1] * f for a, f in zip(acc, fmt)]
    tokens = [v for v, n in zip(summed, [2, 3, 1, 2]) for _ in range(n)]
    mean, var = statistics.mean(tokens), statistics.variance(tokens)  # unbiased, over the 8 valid tokens
    expected = torch.tensor([[(v - mean) / math.sqrt(var + 1e-8)] * 3 for v in summed]) * MASK
    torch.testing.assert_close(got.advantages, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.returns, got.advantages)
    # each group's spread counts whatever its component's scale: a's accuracy, b's (20x larger) format
    per_row = got.advantages[:, 0]
    assert float(per_row[0] - per_row[1]) == pytest.approx(2 * weights[0] / math.sqrt(2) / math.sqrt(var + 1e-8), rel=1e-4)
    assert float(per_row[2] - per_row[3]) == pytest.approx(2 * weights[1] / math.sqrt(2) / math.sqrt(var + 1e-8), rel=1e-4)


def test_without_components_the_summed_reward_is_the_one_component_and_weights_must_match():
    rewards = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 1.0], [3.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    got = gdpo_advantage(token_level_rewards=rewards, response_mask=MASK, group_index=GROUPS)
    one = gdpo_advantage(token_level_rewards=torch.zeros(4, 3), response_mask=MASK, group_index=GROUPS,
                         reward_components=rewards.sum(-1, keepdim=True))
    torch.testing.assert_close(got.advantages, one.advantages)
    with pytest.raises(ValueError, match="1 reward weights for 2 reward components"):
        gdpo_advantage(token_level_rewards=rewards, response_mask=MASK, group_index=GROUPS, reward_components=COMPONENTS, reward_weights=[1.0])
    assert get_advantage_estimator("gdpo") is gdpo_advantage


def test_components_come_from_the_reward_dicts_and_a_missing_key_is_named():
    extra = {"accuracy_reward": [1.0, 0.0], "format_reward": [0.5, 1.0], "acc": [1.0, 0.0]}
    torch.testing.assert_close(reward_components(extra, ["format_reward", "accuracy_reward"], "'fn'"), torch.tensor([[0.5, 1.0], [1.0, 0.0]]))
    with pytest.raises(UserError, match=r"returned no number under 'fmt' for 2 of the batch's responses .*keys: acc, accuracy_reward, format_reward"):
        reward_components(extra, ["fmt"], "'fn'")
    with pytest.raises(UserError, match="under 'format_reward' for 1 of"):
        reward_components({"format_reward": [0.5, float("nan")]}, ["format_reward"], "'fn'")


def _cfg(**algorithm):
    base = {"kind": "rl", "adv_estimator": "gdpo", "gdpo_reward_keys": ["a", "b"], "gdpo_reward_weights": None}
    return {"algorithm": {**base, **algorithm}}


@pytest.mark.parametrize("cfg, problem", [
    (_cfg(), None),
    (_cfg(gdpo_reward_keys=[]), "needs algorithm.gdpo_reward_keys"),
    (_cfg(gdpo_reward_weights=[1.0]), "1 weight(s) for 2"),
    (_cfg(gdpo_reward_keys=["a", "a"]), "names a key twice"),
    (_cfg(adv_estimator="grpo"), "read only by algorithm.adv_estimator=gdpo, not grpo"),
    (_cfg(adv_estimator="grpo", gdpo_reward_keys=[]), None),
    ({**_cfg(), "env": {"train_env_manager": {"tags": ["SimpleSokoban"]}}}, "from its environments"),
    ({**_cfg(), "reward": {"self_judge": {"enable": True}}}, "self-judge"),
    ({"algorithm": {**_cfg()["algorithm"], "mix": {"expert_files": ["x.parquet"]}}}, "expert rows"),
])
def test_the_config_check(cfg, problem):
    def namespace(node):  # the checks read a config's attributes
        return SimpleNamespace(**{k: namespace(v) for k, v in node.items()}) if isinstance(node, dict) else node
    problems = check_gdpo(namespace(cfg))
    assert problems == [] if problem is None else (len(problems) == 1 and problem in problems[0]), problems
