"""step_reward: each turn's own step reward, normalised over the step samples (turns) of its group, as
ROLL scores its step env managers' samples under grpo / reinforce; numbers computed here by hand."""

from __future__ import annotations

import statistics

import pytest
import torch

from posttrain.algorithms import get_advantage_estimator
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.rollout.trajectory import Trajectory, Turn, to_rollout_batch
from posttrain.trainer.advantages import compute_advantages, make_shaping_state

# Two groups of two episodes, response width 8 (a turn: two model tokens, then one environment token):
#   g1/A: 2 turns, rewards 0, 1          g1/B: 3 turns, rewards -0.1, 0, 0.5
#   g2/A: 1 turn, reward 1               g2/B: 2 turns, rewards 0, 0
REWARDS = [[0.0, 1.0], [-0.1, 0.0, 0.5], [1.0], [0.0, 0.0]]
GROUPS = ["g1", "g1", "g2", "g2"]
TAGS = ["FL", "W", "FL", "W"]


def _index() -> torch.Tensor:
    index = torch.full((4, 8), -1)
    for b, rewards in enumerate(REWARDS):
        for k in range(len(rewards)):
            index[b, 3 * k: 3 * k + 2] = k
    return index


INDEX = _index()  # (B, T)
MASK = (INDEX >= 0).float()
TURN_REWARDS = torch.tensor([r + [0.0] * (3 - len(r)) for r in REWARDS])  # (B, K)
STATES = torch.tensor([[0] * len(r) + [-1] * (3 - len(r)) for r in REWARDS])  # (B, K): only which turns exist


def step_reward(**kw) -> torch.Tensor:
    args = dict(response_mask=MASK, turn_index=INDEX, turn_rewards=TURN_REWARDS, turn_states=STATES)
    return get_advantage_estimator("step_reward")(**{**args, **kw}).advantages


def per_turn(adv: torch.Tensor) -> list[list[float]]:
    """Each turn's advantage (read on its first token; the test checks the turn's tokens agree)."""
    out = []
    for b, rewards in enumerate(REWARDS):
        for k in range(len(rewards)):
            assert adv[b, 3 * k].item() == adv[b, 3 * k + 1].item()
        out.append([adv[b, 3 * k].item() for k in range(len(rewards))])
    return out


def standardised(values: list[float]) -> list[float]:
    """ROLL's mean_std over one scope: (x - mean) / (unbiased std + 1e-6)."""
    mean, std = statistics.fmean(values), statistics.stdev(values)
    return [(v - mean) / (std + 1e-6) for v in values]


def test_each_turn_is_its_own_reward_standardised_over_its_groups_turns():
    adv = step_reward(norm_groups=GROUPS, norm_method="mean_std")
    g1 = standardised(REWARDS[0] + REWARDS[1])  # the five step samples of g1, not its two episodes
    g2 = standardised(REWARDS[2] + REWARDS[3])
    assert per_turn(adv) == [pytest.approx(g1[:2], abs=1e-6), pytest.approx(g1[2:], abs=1e-6),
                             pytest.approx(g2[:1], abs=1e-6), pytest.approx(g2[1:], abs=1e-6)]
    assert adv[MASK == 0].abs().max().item() == 0.0  # environment tokens and padding take nothing
    returns = get_advantage_estimator("step_reward")(response_mask=MASK, turn_index=INDEX, turn_rewards=TURN_REWARDS,
                                                     turn_states=STATES, norm_groups=GROUPS, norm_method="mean_std").returns
    assert torch.equal(returns, adv)


def test_the_grouping_and_scope_keys_choose_the_statistics():
    flat = [r for rs in REWARDS for r in rs]
    mean = statistics.fmean(flat)
    # identity (ROLL's default): the raw step rewards
    assert per_turn(step_reward()) == [pytest.approx(r) for r in REWARDS]
    # batch grouping, mean only: every step sample minus the mean of all eight
    assert per_turn(step_reward(norm_groups=None, norm_method="mean")) == [pytest.approx([r - mean for r in rs]) for rs in REWARDS]
    # tags: FL holds g1/A and g2/A's turns, W the others
    fl, w = standardised(REWARDS[0] + REWARDS[2]), standardised(REWARDS[1] + REWARDS[3])
    assert per_turn(step_reward(norm_groups=TAGS, norm_method="mean_std")) == [
        pytest.approx(fl[:2], abs=1e-6), pytest.approx(w[:3], abs=1e-6), pytest.approx(fl[2:], abs=1e-6), pytest.approx(w[3:], abs=1e-6)]
    # the group's mean and the batch's std (norm_mean_type group, norm_std_type batch)
    std = statistics.stdev(flat)
    mixed = per_turn(step_reward(norm_groups=GROUPS, norm_method="identity", norm_mean_type="group", norm_std_type="batch"))
    g1, g2 = REWARDS[0] + REWARDS[1], REWARDS[2] + REWARDS[3]
    assert mixed[1] == pytest.approx([(r - statistics.fmean(g1)) / (std + 1e-6) for r in REWARDS[1]], abs=1e-6)
    assert mixed[3] == pytest.approx([(r - statistics.fmean(g2)) / (std + 1e-6) for r in REWARDS[3]], abs=1e-6)


def test_a_flat_group_scores_zero_and_reward_clip_bounds_the_normalised_score():
    flat = TURN_REWARDS.clone()
    flat[2:] = torch.tensor([[0.5, 0.0, 0.0], [0.5, 0.5, 0.0]])  # g2's three step samples all 0.5: std 0
    adv = step_reward(turn_rewards=flat, norm_groups=GROUPS, norm_method="mean_std")
    assert per_turn(adv)[2:] == [[0.0], [0.0, 0.0]] and per_turn(adv)[0] != [0.0, 0.0]
    clipped = per_turn(step_reward(norm_groups=GROUPS, norm_method="mean_std", reward_clip=1.0))
    g1 = standardised(REWARDS[0] + REWARDS[1])
    assert clipped[0] == pytest.approx([max(-1.0, min(1.0, v)) for v in g1[:2]], abs=1e-6)
    assert max(abs(v) for v in g1) > 1.0 and max(abs(v) for vs in clipped for v in vs) == pytest.approx(1.0)


def test_without_turn_records_it_says_what_it_needs():
    with pytest.raises(ValueError, match="step_reward needs per-turn records"):
        get_advantage_estimator("step_reward")(response_mask=MASK)


def episode(tag: str, group: str, rewards: list[float]) -> Trajectory:
    """Two model tokens per action, one environment token between actions."""
    t = Trajectory(tag, 7, group, [1, 2, 3])
    for k, reward in enumerate(rewards):
        action = t.add([10, 11], [-0.5, -0.5])
        observation = t.add([20], None) if k < len(rewards) - 1 else (action[1], action[1])
        t.turns.append(Turn(action, observation, "Up", reward, True, f"s{k}"))
    return t


AGENTIC = "env.train_env_manager.tags=[FL]"  # an agentic stage (the normalisation is refused on a prompt stage)


def trainer_advantages(*overrides: str) -> torch.Tensor:
    trajs = [episode(tag, f"s1/{g}", r) for tag, g, r in zip(TAGS, GROUPS, REWARDS)]
    batch = to_rollout_batch(trajs, 0, 0, [""] * 4)
    alg = load_config(None, ["algorithm.adv_estimator=step_reward", AGENTIC, *overrides]).algorithm
    scores = torch.tensor([t.reward for t in trajs])
    compute_advantages(batch, scores, alg, make_shaping_state(alg), 1)
    return batch.advantages


def test_the_trainer_hands_it_the_agentic_norm_and_reward_clip_and_whitens_after():
    """compute_advantages passes algorithm.agentic_reward_norm (its grouping read from the rows) and
    reward_clip to the estimator; whiten_advantages then acts on the per-turn numbers."""
    g1 = standardised(REWARDS[0] + REWARDS[1])
    adv = trainer_advantages("algorithm.agentic_reward_norm.grouping=traj_group_id", "algorithm.agentic_reward_norm.method=mean_std")
    assert adv[0, :2].tolist() == pytest.approx([g1[0]] * 2, abs=1e-6) and adv[1, 6:8].tolist() == pytest.approx([g1[4]] * 2, abs=1e-6)
    assert adv[0, 2].item() == 0.0  # the environment's token
    by_tag = trainer_advantages("algorithm.agentic_reward_norm.grouping=tags", "algorithm.agentic_reward_norm.method=mean_std")
    assert by_tag[0, 0].item() == pytest.approx(standardised(REWARDS[0] + REWARDS[2])[0], abs=1e-6)
    clipped = trainer_advantages("algorithm.agentic_reward_norm.grouping=traj_group_id", "algorithm.agentic_reward_norm.method=mean_std",
                                 "algorithm.reward_clip=1.0")
    assert clipped.abs().max().item() == pytest.approx(1.0) and adv.abs().max().item() > 1.0
    raw = trainer_advantages()  # identity over the batch: the step rewards themselves
    assert raw[1, 6].item() == pytest.approx(0.5) and raw[2, 0].item() == pytest.approx(1.0)
    white = trainer_advantages("algorithm.whiten_advantages=true")
    tokens = raw[MASK > 0]
    expected = (tokens - tokens.mean()) / (tokens.var() + 1e-8).sqrt()  # masked whitening over the model's tokens
    assert white[MASK > 0].tolist() == pytest.approx(expected.tolist(), abs=1e-5)


@pytest.mark.parametrize("override", ["algorithm.use_kl_in_reward=true", "algorithm.whiten_rewards=true",
                                      "algorithm.reward_norm_mean=group", "algorithm.reward_norm_std=batch", "algorithm.gamma=0.9"])
def test_shaping_it_never_reads_is_refused(override):
    key = override.partition("=")[0]
    with pytest.raises(ConfigError, match=f"{key}.*adv_estimator step_reward gives every token of a turn that turn's own step score"):
        load_config(None, ["algorithm.adv_estimator=step_reward", override])


@pytest.mark.parametrize("override", ["algorithm.use_kl_in_reward=true", "algorithm.gamma=0.9", "algorithm.reward_clip=1.0",
                                      "algorithm.agentic_reward_norm.method=mean_std"])
def test_what_step_reinforce_never_reads_is_refused(override):
    key = override.partition("=")[0].removesuffix(".method")
    with pytest.raises(ConfigError, match=f"{key}.*adv_estimator step_reinforce credits each turn .*mode return"):
        load_config(None, ["algorithm.adv_estimator=step_reinforce", override])


def test_return_and_gigpo_modes_score_each_turn_as_rolls_step_reinforce_and_gigpo():
    """One environment group of two episodes: A takes 2 turns (rewards 0, 1), B 1 turn (reward 3).
    The turns' discounted returns with gamma 0.5: A 0.5, 1; B 3. Method mean over the group's three
    step samples (ROLL's traj_group_id / mean)."""
    import statistics

    from posttrain.algorithms import step_reward_advantage

    turn_index = torch.tensor([[0, 0, 1], [0, -1, -1]])  # (B, T): A's tokens 0-1 turn 0, token 2 turn 1
    turn_rewards = torch.tensor([[0.0, 1.0], [3.0, 0.0]])
    turn_states = torch.tensor([[0, 1], [0, -1]])  # A's first turn and B's were taken in the same state
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    common = dict(response_mask=mask, turn_index=turn_index, turn_rewards=turn_rewards, turn_states=turn_states,
                  norm_groups=["g", "g"], norm_method="mean", step_gamma=0.5)
    returns = [0.5, 1.0, 3.0]  # A turn 0, A turn 1, B turn 0
    mean = statistics.mean(returns)
    adv = step_reward_advantage(mode="return", **common).advantages
    torch.testing.assert_close(adv, torch.tensor([[0.5 - mean, 0.5 - mean, 1.0 - mean], [3.0 - mean, 0.0, 0.0]]))
    # gigpo: the episode score counted once per turn (A 1 twice, B 3 once), and the returns centred within
    # each state: A's first turn and B's share state 0; A's second turn is alone in state 1 (0)
    episode = [1.0, 1.0, 3.0]
    e_mean = statistics.mean(episode)
    s0 = statistics.mean([0.5, 3.0])
    adv = step_reward_advantage(mode="gigpo", episode_weight=2.0, step_weight=0.5, **common).advantages
    want_a0, want_a1, want_b = 2 * (1 - e_mean) + 0.5 * (0.5 - s0), 2 * (1 - e_mean), 2 * (3 - e_mean) + 0.5 * (3.0 - s0)
    torch.testing.assert_close(adv, torch.tensor([[want_a0, want_a0, want_a1], [want_b, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="mode must be one of reward, return, gigpo"):
        step_reward_advantage(mode="other", **common)
