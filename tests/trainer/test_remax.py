"""ReMax in the RL step: one greedy response per prompt, scored, becomes each sample's baseline."""

from __future__ import annotations

import pytest
import torch

from posttrain.algorithms import EstimatorNeeds, estimator_needs, register_advantage_estimator
from posttrain.algorithms import registry
from posttrain.data import collate_prompts
from posttrain.trainer.rl import RLTrainer
from rl_helpers import tiny_rl_files, tiny_rl_trainer


def test_registry_says_which_estimators_need_a_greedy_baseline():
    assert estimator_needs("remax").greedy_baseline
    assert not any(estimator_needs(n).greedy_baseline for n in ("grpo", "rloo", "gae", "reinforce_plus_plus"))


def test_a_user_estimator_can_ask_for_the_baseline():
    saved = dict(registry.ADVANTAGE_ESTIMATORS), list(registry._CANONICAL[id(registry.ADVANTAGE_ESTIMATORS)])
    try:
        @register_advantage_estimator("my_greedy_baseline", needs=EstimatorNeeds(greedy_baseline=True))
        def mine(**_):
            raise NotImplementedError

        assert estimator_needs("my_greedy_baseline").greedy_baseline
    finally:
        registry.ADVANTAGE_ESTIMATORS.clear()
        registry.ADVANTAGE_ESTIMATORS.update(saved[0])
        registry._CANONICAL[id(registry.ADVANTAGE_ESTIMATORS)][:] = saved[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("remax"), train=16)


def trainer(files, estimator: str) -> RLTrainer:
    return tiny_rl_trainer(
        files, "rollout.n=3", "actor.ppo_micro_batch_size_per_gpu=12", f"algorithm.adv_estimator={estimator}",
        run=f"run-{estimator}",
    )


def one_step(t: RLTrainer):
    """Run one step with the actor update captured (weights unchanged, so greedy decoding repeats)."""
    seen = []
    t.roles.actor.update = lambda batch, step=0, mini_size=None: seen.append(batch) or {}
    rows = t.sampler.next_batch()
    prompts = collate_prompts([t.train_set[i] for i in rows], t.pad_id, uid_prefix="s1")
    return prompts, t.step(prompts, 1), seen[0]


def test_remax_step_subtracts_the_greedy_score_of_the_same_prompt(files):
    t = trainer(files, "remax")
    prompts, metrics, batch = one_step(t)
    assert "timing/gen_baseline_s" in metrics and "critic/reward_baseline/mean" in metrics
    # The baseline is the score of the current policy's greedy answer to each row's prompt.
    greedy = t.roles.rollout.generate(prompts, t.sampling.greedy(), expected_version=t.roles.actor.version)  # wakes the engine (free_cache_engine)
    greedy_scores, _, _ = t.rewards.score(greedy, t.rewards.decode(greedy))  # (4,)
    torch.testing.assert_close(batch.reward_baselines, greedy_scores.repeat_interleave(3))
    # ReMax: advantage = undiscounted return-to-go minus the baseline, on valid tokens only.
    mask = batch.response_mask
    returns = (batch.token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1)  # (B, T)
    torch.testing.assert_close(batch.advantages, returns - batch.reward_baselines[:, None] * mask)


def test_estimators_without_a_baseline_skip_the_greedy_rollout(files):
    t = trainer(files, "grpo")
    _, metrics, batch = one_step(t)
    assert t.baseline_sampling is None and batch.reward_baselines is None
    assert "timing/gen_baseline_s" not in metrics
