"""An agent function's calls as turns of their episodes (env.train_rows turn, Trinity-RFT's
multi_step_grpo): GRPO counts each episode once and gives every call its episode's advantage;
mini-batches count calls (env.turn_mini_batch_size). Without it the group statistics count calls."""

from __future__ import annotations

import statistics

import pytest
import torch

from posttrain.config import load_config
from posttrain.errors import ConfigError
from posttrain.rollout.agent_endpoint import EpisodeRecord, RecordedCall
from posttrain.rollout.agent_fn import AgentEpisode, AgentTask
from posttrain.rollout.agent_rows import episode_rows
from posttrain.trainer.advantages import compute_advantages, episode_advantages, make_shaping_state
from posttrain.trainer.agent_fn import check_agent_fn
from posttrain.trainer.agentic import training_rows

# (group, calls, reward) per episode: the episodes of a group differ in how many calls they made
EPISODES = [("g0", 1, 1.0), ("g0", 3, 0.0), ("g0", 2, 0.5), ("g1", 4, 1.0), ("g1", 1, 0.0)]


def _batch():
    episodes = []
    for k, (group, calls, reward) in enumerate(EPISODES):
        record = EpisodeRecord([RecordedCall([5, 6 + c], [7] * (c + 1), [-0.5] * (c + 1), 0) for c in range(calls)])
        episodes.append(AgentEpisode(AgentTask(group, k, {}, 0), record, reward))
    return episode_rows(episodes, pad_id=0)


def _config(*extra):
    return load_config(None, ["algorithm.adv_estimator=grpo", "rollout.agent.function=json:dumps", *extra])


def _grpo(rewards: list[float]) -> list[float]:
    mean, std = statistics.mean(rewards), statistics.stdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


def test_each_episode_counts_once_and_every_call_gets_its_episode_s_advantage():
    batch, scores = _batch()
    cfg = _config("env.train_rows=turn")
    episode_advantages(batch, scores, cfg.algorithm, make_shaping_state(cfg.algorithm), len(batch))
    expected = _grpo([1.0, 0.0, 0.5]) + _grpo([1.0, 0.0])  # over episodes, not calls
    per_call = [value for (_, calls, _), value in zip(EPISODES, expected) for _ in range(calls)]
    assert len(batch) == 11
    for row, value in enumerate(per_call):
        mask = batch.response_mask[row]
        torch.testing.assert_close(batch.advantages[row], value * mask)
        torch.testing.assert_close(batch.returns[row], value * mask)
        assert float(batch.token_level_scores[row].sum()) == scores[row]  # the episode's reward, on the call's last token


def test_step_norm_divides_by_the_episode_s_calls():
    batch, scores = _batch()
    cfg = _config("env.train_rows=turn", "algorithm.adv_estimator_args={enable_step_norm: true}")
    episode_advantages(batch, scores, cfg.algorithm, make_shaping_state(cfg.algorithm), len(batch))
    expected = _grpo([1.0, 0.0, 0.5]) + _grpo([1.0, 0.0])
    firsts = [0, 1, 4, 6, 10]  # the first call row of each episode
    got = [float(batch.advantages[row, 0]) for row in firsts]
    assert got == pytest.approx([v / calls for v, (_, calls, _) in zip(expected, EPISODES)], rel=1e-5)


@pytest.mark.parametrize("threshold, skipped", [(0.6, {"g0"}), (0.8, {"g0", "g1"}), (0.1, set())])
def test_std_threshold_takes_the_calls_of_uniform_groups_out_of_the_losses(threshold, skipped):
    """Trinity-RFT's multi_step_grpo std_threshold: a group of episodes whose rewards' std is at most the
    bound leaves the losses (loss_mask 0 on each of its calls); the others train as before. g0's
    rewards [1, 0, 0.5] have std 0.5, g1's [1, 0] std 0.707."""
    batch, scores = _batch()
    cfg = _config("env.train_rows=turn", "algorithm.filter_groups.enable=true", f"algorithm.filter_groups.std_threshold={threshold}")
    metrics = episode_advantages(batch, scores, cfg.algorithm, make_shaping_state(cfg.algorithm), len(batch))
    groups = [group for group, calls, _ in EPISODES for _ in range(calls)]
    for row, group in enumerate(groups):
        trained = batch.train_mask[row].sum().item()
        assert (trained == 0) == (group in skipped), (row, group)
        if group in skipped:
            assert batch.advantages[row].abs().sum() == 0
    assert metrics["agent/skipped_groups"] == len(skipped)


def test_std_threshold_is_accepted_with_turn_rows_only():
    with pytest.raises(ConfigError, match="dynamic sampling re-samples prompts"):
        check_agent_fn(_config("algorithm.filter_groups.enable=true", "algorithm.filter_groups.std_threshold=0.1"))


def test_without_turn_rows_the_group_statistics_count_calls():
    batch, scores = _batch()
    cfg = _config()
    compute_advantages(batch, scores, cfg.algorithm, make_shaping_state(cfg.algorithm), len(batch))
    g0 = [1.0] + [0.0] * 3 + [0.5] * 2  # six calls
    assert float(batch.advantages[0, 0]) == pytest.approx(_grpo(g0)[0], rel=1e-5)
    assert float(batch.advantages[0, 0]) != pytest.approx(_grpo([1.0, 0.0, 0.5])[0], rel=1e-3)


def test_mini_batches_count_calls_with_turn_mini_batch_size():
    batch, _ = _batch()
    assert training_rows(_config("env.train_rows=turn", "env.turn_mini_batch_size=4"), batch, 0).actor_mini == 4
    # without it the calls are shared over the mini-batches an episode step takes (train_batch_size / ppo_mini_batch_size)
    shared = training_rows(_config("data.train_batch_size=2", "actor.ppo_mini_batch_size=1"), batch, 0).actor_mini
    assert shared == 6  # 11 calls over 2 mini-batches


@pytest.mark.parametrize("extra, message", [
    (["algorithm.adv_estimator=rloo"], "algorithm.adv_estimator: rloo with env.train_rows turn"),
    (["algorithm.use_kl_in_reward=true"], "algorithm.use_kl_in_reward: with env.train_rows turn"),
])
def test_turn_rows_of_an_agent_function_need_grpo_without_per_token_rewards(extra, message):
    cfg = _config("env.train_rows=turn", *extra)
    with pytest.raises(ConfigError, match=message):
        check_agent_fn(cfg)
