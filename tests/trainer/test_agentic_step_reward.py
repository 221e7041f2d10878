"""adv_estimator step_reward in the RL step (ROLL's grpo over step env managers' samples): on FrozenLake
and a walk with a tiny random model, each turn row trains with its own step reward standardised over
the turns of its environment group, and the update moves the weights."""

from __future__ import annotations

import statistics

import pytest
import torch

from posttrain.config.load import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext

ENVS = ('env.custom_envs={FL: {env_type: frozen_lake, env_config: {size: 3, is_slippery: false}, max_actions_per_traj: 3, '
        'max_tokens_per_step: 3, format_penalty: -0.1, env_instruction: "Go"}, W: {env_type: walk, env_config: {size: 4}, '
        'max_steps: 3, max_tokens_per_step: 2, format_penalty: -0.1}}')
RUN = ["data.max_prompt_length=64", "data.max_response_length=96", "actor.ppo_micro_batch_size_per_gpu=16", "trainer.logger=[]",
       ENVS, "env.train_env_manager.tags=[FL,W]", "env.train_env_manager.num_env_groups=2", "env.train_env_manager.group_size=4",
       "data.train_batch_size=2", "rollout.n=4", "actor.ppo_mini_batch_size=2", "actor.optim.lr=5e-3", "trainer.total_training_steps=1",
       "algorithm.adv_estimator=step_reward", "env.train_rows=turn", "algorithm.agentic_reward_norm.grouping=traj_group_id",
       "algorithm.agentic_reward_norm.method=mean_std"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("step_reward") / "model", layers=1, hidden=32, heads=4, seed=0)


def test_turn_rows_train_with_their_own_step_reward_standardised_over_the_groups_turns(model, tmp_path):
    cfg = load_config(None, [f"model.path={model}", *RUN])
    t = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)))
    t.roles.sync.push(t.roles.actor.version)
    before = torch.cat([p.detach().flatten().clone() for p in t.roles.actor.model.parameters()])
    experience = t.explore(1, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version)
    batch = experience.batch
    metrics, train = t.learn(experience, 1, PhaseTimer(t.observer.watch()))
    # the expected numbers, from the episodes' per-turn rewards alone: one sample per turn, grouped by environment group
    rewards = [(g, r) for g, info in zip(batch.group_index, batch.extra_info) for r in info["turn_rewards"]]
    expected = []
    for g, r in rewards:
        group = [x for h, x in rewards if h == g]
        std = statistics.stdev(group)
        expected.append((r - statistics.fmean(group)) / (std + 1e-6) if std > 1e-6 else 0.0)
    assert len(train) == len(rewards) > len(batch)  # one training row per turn, some episode took several turns
    got = [float(a[m > 0][0]) for a, m in zip(train.advantages, train.response_mask)]  # each turn row's advantage
    assert all(bool((a[m > 0] == a[m > 0][0]).all()) for a, m in zip(train.advantages, train.response_mask))
    assert got == pytest.approx(expected, abs=1e-5)
    assert any(abs(x) > 0.1 for x in expected)  # the walk's groups spread: the check is not over zeros
    after = torch.cat([p.detach().flatten() for p in t.roles.actor.model.parameters()])
    assert "actor/pg_loss" in metrics and not torch.equal(before, after)
