"""Step-level credit in the RL step: an agentic batch's per-turn records reach the advantage
estimator, and each `algorithm.gigpo.*` key changes the advantages as GiGPO's formula says."""

from __future__ import annotations

import pytest
import torch

from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.rollout.trajectory import Trajectory, Turn, to_rollout_batch
from posttrain.trainer.advantages import compute_advantages, make_shaping_state
from posttrain.trainer.agentic import check_idle_env_keys


def episode(states: list[str], rewards: list[float]) -> Trajectory:
    """Two model tokens per action, one environment token between actions."""
    t = Trajectory("FL", 7, "s1/FL/g0", [1, 2, 3])
    for k, (state, reward) in enumerate(zip(states, rewards)):
        action = t.add([10, 11], [-0.5, -0.5])
        observation = t.add([20], None) if k < len(states) - 1 else (action[1], action[1])
        t.turns.append(Turn(action, observation, "Up", reward, True, state))
    return t


def advantages(*overrides: str) -> torch.Tensor:
    trajs = [episode(["a", "b"], [0.0, 1.0]), episode(["a", "a", "c"], [-0.1, 0.0, 0.0])]
    batch = to_rollout_batch(trajs, 0, 0, ["", ""])
    alg = load_config(None, ["algorithm.adv_estimator=gigpo", "algorithm.norm_adv_by_std_in_grpo=false", *overrides]).algorithm
    scores = torch.tensor([t.reward for t in trajs])
    compute_advantages(batch, scores, alg, make_shaping_state(alg), 1)
    return batch.advantages


def test_gigpo_keys_change_the_step_advantages_as_the_formula_says():
    base = advantages()
    # gamma 0.95: returns A: [0.95, 1], B: [-0.1, 0, 0]; state a = {0.95, -0.1, 0}, mean 0.85 / 3
    a0 = 0.55 + 0.95 - 0.85 / 3
    assert base[0, :2].tolist() == pytest.approx([a0, a0]) and base[0, 2].item() == 0.0  # the env token
    assert base[0, 3:5].tolist() == pytest.approx([0.55, 0.55])  # state b seen once
    assert base[1, 3:5].tolist() == pytest.approx([-0.55 - 0.85 / 3] * 2)
    gamma = advantages("algorithm.gigpo.step_gamma=0.5")
    assert gamma[0, 0].item() == pytest.approx(0.55 + 0.5 - 0.4 / 3)
    weight = advantages("algorithm.gigpo.step_weight=0.0")
    assert weight[0, 0].item() == pytest.approx(0.55) and weight[1, 6].item() == pytest.approx(-0.55)
    episode_weight = advantages("algorithm.gigpo.episode_weight=0.0")
    assert episode_weight[0, 0].item() == pytest.approx(0.95 - 0.85 / 3) and episode_weight[0, 3].item() == 0.0


def test_gigpo_on_a_single_turn_stage_is_refused():
    cfg = load_config(None, ["algorithm.adv_estimator=gigpo"])
    with pytest.raises(ConfigError, match="algorithm.adv_estimator: gigpo gives step-level credit over the turns"):
        check_idle_env_keys(cfg)


def test_trinity_multi_step_grpo_and_step_wise_grpo_are_grpo_over_whole_episodes(tmp_path):
    from posttrain.algorithms import get_advantage_estimator, grpo_advantage
    from posttrain.config.dialects import read_foreign

    (tmp_path / "trinity.yaml").write_text("mode: both\nalgorithm: {algorithm_type: multi_step_grpo, repeat_times: 4}\n")
    native = read_foreign(tmp_path / "trinity.yaml").native
    assert native["algorithm"]["kind"] == "rl" and native["algorithm"]["adv_estimator"] == "grpo"
    assert get_advantage_estimator("step_wise_grpo") is grpo_advantage
