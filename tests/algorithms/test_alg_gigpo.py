"""GiGPO's step-level credit against numbers computed by hand, and the per-turn records the agent
loop hands it (anchor ids per group, turn tensors)."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algorithms import get_advantage_estimator, grpo_advantage
from posttrain.algorithms.advantages_steps import discounted_returns, gigpo_advantage, step_group_advantages
from posttrain.algorithms.registry import estimator_needs
from posttrain.rollout.trajectory import Trajectory, Turn, anchor_ids, turn_tensors

# One group of two episodes on the same board, response width 10:
#   A: turn 0 in state s0 (tokens 0-1, reward 0), turn 1 in s1 (tokens 5-6, reward 1): success, score 1
#   B: turn 0 in s0 (tokens 0-1, reward -0.1), turn 1 in s0 again (tokens 4-5, reward 0),
#      turn 2 in s2 (tokens 8-9, reward 0): score -0.1
INDEX = torch.tensor([[0, 0, -1, -1, -1, 1, 1, -1, -1, -1],
                      [0, 0, -1, -1, 1, 1, -1, -1, 2, 2]])  # (B, T)
MASK = (INDEX >= 0).float()  # (B, T) the model's tokens
TURN_REWARDS = torch.tensor([[0.0, 1.0, 0.0], [-0.1, 0.0, 0.0]])  # (B, K)
STATES = torch.tensor([[0, 1, -1], [0, 0, 2]])  # (B, K) s0 = 0, s1 = 1, s2 = 2
SCORES = torch.zeros(2, 10)
SCORES[0, 6], SCORES[1, 9] = 1.0, -0.1  # the trajectory score on its last model token


def gigpo(**kw):
    args = dict(token_level_rewards=SCORES, response_mask=MASK, group_index=["g", "g"], turn_index=INDEX,
                turn_rewards=TURN_REWARDS, turn_states=STATES, step_gamma=0.5)
    return gigpo_advantage(**{**args, **kw}).advantages


def test_discounted_returns_by_hand():
    valid = STATES >= 0
    # A: R1 = 1, R0 = 0 + 0.5 * 1; B: R2 = 0, R1 = 0 + 0.5 * 0, R0 = -0.1 + 0.5 * 0
    assert torch.allclose(discounted_returns(TURN_REWARDS, valid, 0.5), torch.tensor([[0.5, 1.0, 0.0], [-0.1, 0.0, 0.0]], dtype=torch.float64))


def test_gigpo_without_std_by_hand():
    adv = gigpo(norm_adv_by_std=False)
    # episode: mean (1 - 0.1) / 2 = 0.45 -> A +0.55, B -0.55
    # step group s0 = {A0: 0.5, B0: -0.1, B1: 0.0}, mean 0.4 / 3 -> +11/30, -7/30, -4/30; s1 and s2 seen once -> 0
    a0, a1 = 0.55 + 11 / 30, 0.55
    b0, b1, b2 = -0.55 - 7 / 30, -0.55 - 4 / 30, -0.55
    expected = torch.tensor([[a0, a0, 0, 0, 0, a1, a1, 0, 0, 0],
                             [b0, b0, 0, 0, b1, b1, 0, 0, b2, b2]])
    assert torch.allclose(adv, expected, atol=1e-6)
    # the weights scale the two levels
    half = gigpo(norm_adv_by_std=False, step_weight=0.5, episode_weight=2.0)
    assert half[0, 0].item() == pytest.approx(2 * 0.55 + 0.5 * 11 / 30) and half[1, 8].item() == pytest.approx(-1.1)


def test_gigpo_with_std_by_hand():
    adv = gigpo(epsilon=0.0)
    episode = 0.55 / math.sqrt(2 * 0.55**2)  # unbiased std of {1, -0.1} = 0.55 * sqrt(2)
    devs = [11 / 30, -7 / 30, -4 / 30]
    std = math.sqrt(sum(d * d for d in devs) / 2)
    assert adv[0, 0].item() == pytest.approx(episode + devs[0] / std, rel=1e-5)
    assert adv[0, 5].item() == pytest.approx(episode, rel=1e-5)  # s1 seen once: episode advantage only
    assert adv[1, 4].item() == pytest.approx(-episode + devs[2] / std, rel=1e-5)
    assert adv[1, 3].item() == 0.0 and adv[0, 9].item() == 0.0  # environment tokens and padding


def test_without_step_weight_gigpo_is_grpo_on_the_model_tokens():
    grpo = grpo_advantage(token_level_rewards=SCORES, response_mask=MASK, group_index=["g", "g"]).advantages
    assert torch.allclose(gigpo(step_weight=0.0), grpo)
    assert get_advantage_estimator("gigpo") is gigpo_advantage and estimator_needs("gigpo").turns
    with pytest.raises(ValueError, match="gigpo needs per-turn records"):
        gigpo_advantage(token_level_rewards=SCORES, response_mask=MASK, group_index=["g", "g"])


def test_a_state_seen_once_gets_no_step_advantage():
    returns = torch.tensor([[3.0, 1.0]], dtype=torch.float64)
    assert step_group_advantages(returns, torch.tensor([[0, 1]]), True, 1e-6).tolist() == [[0.0, 0.0]]


def traj(group: str, states: list, rewards: list[float], spans: list[tuple[int, int]]) -> Trajectory:
    t = Trajectory("T", 1, group, [1, 2], response_ids=[5] * 10)
    t.turns = [Turn(span, (span[1], span[1]), "a", r, True, s) for s, r, span in zip(states, rewards, spans)]
    return t


def test_anchor_ids_group_equal_states_within_a_group_only_and_build_the_turn_tensors():
    trajs = [traj("g0", ["x", "y"], [0.0, 1.0], [(0, 2), (5, 7)]),
             traj("g0", ["x", "x", "z"], [-0.1, 0.0, 0.0], [(0, 2), (4, 6), (8, 10)]),
             traj("g1", ["x"], [0.5], [(0, 3)])]  # the same state in another group: another anchor
    assert anchor_ids(trajs) == [[0, 1], [0, 0, 2], [3]]
    rows = [{"turn_spans": [list(x.action) for x in t.turns], "turn_rewards": [x.reward for x in t.turns],
             "turn_states": a} for t, a in zip(trajs, anchor_ids(trajs))]
    tensors = turn_tensors(rows, 10)
    assert torch.equal(tensors.index[:2], INDEX) and tensors.index[2].tolist() == [0, 0, 0] + [-1] * 7
    assert torch.allclose(tensors.rewards[:2], TURN_REWARDS) and tensors.states.tolist() == [[0, 1, -1], [0, 0, 2], [3, -1, -1]]
    assert turn_tensors([{"seed": 1}], 10) is None  # a single-turn batch has no turn records


def test_step_reinforce_normalises_returns_over_the_group_by_hand():
    from posttrain.algorithms import step_reinforce_advantage

    adv = step_reinforce_advantage(response_mask=MASK, group_index=["g", "g"], turn_index=INDEX, turn_rewards=TURN_REWARDS,
                                   turn_states=STATES, step_gamma=0.5, norm_adv_by_std=False).advantages
    # returns {A: 0.5, 1; B: -0.1, 0, 0}, one group of five turns, mean 1.4 / 5 = 0.28
    assert adv[0, 0].item() == pytest.approx(0.22) and adv[0, 5].item() == pytest.approx(0.72)
    assert adv[1, 0].item() == pytest.approx(-0.38) and adv[1, 8].item() == pytest.approx(-0.28) and adv[1, 2].item() == 0.0
