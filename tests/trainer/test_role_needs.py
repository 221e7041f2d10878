"""Roles from the estimator's registry entry: a critic for `values`, a reference for `ref_logprobs`,
a greedy rollout for `reward_baselines`; aliases (`ppo` for `gae`) build what their canonical name
builds, in the config checks, the plan and the trainer."""

from __future__ import annotations

import pytest
import torch

from posttrain.algorithms import (
    ADVANTAGE_ESTIMATORS,
    AdvantageOutput,
    EstimatorNeeds,
    advantage_estimator_names,
    estimator_needs,
    grpo_advantage,
    register_advantage_estimator,
)
from posttrain.algorithms import registry
from posttrain.config import load_config
from posttrain.config.checks import RoleNeeds, role_needs
from posttrain.config.derive import derive
from posttrain.config.plan import batch_plan
from posttrain.errors import ConfigError
from rl_helpers import tiny_rl_files, tiny_rl_trainer

# What every built-in estimator declares (aliases included): the table a new estimator joins.
NEEDS = {
    "gae": EstimatorNeeds(values=True), "ppo": EstimatorNeeds(values=True),
    "remax": EstimatorNeeds(greedy_baseline=True),
    "grpo": EstimatorNeeds(), "gdpo": EstimatorNeeds(), "grpo_passk": EstimatorNeeds(), "rloo": EstimatorNeeds(), "opo": EstimatorNeeds(),
    "gpg": EstimatorNeeds(), "opmd": EstimatorNeeds(), "reinforce": EstimatorNeeds(),
    "reinforce_plus_plus": EstimatorNeeds(), "reinforceplusplus": EstimatorNeeds(),
    "reinforce_plus_plus_baseline": EstimatorNeeds(), "reinforceplusplus_baseline": EstimatorNeeds(),
    "asymre": EstimatorNeeds(), "rec": EstimatorNeeds(),
    "on_policy_distill": EstimatorNeeds(reference=True), "jsd": EstimatorNeeds(reference=True),
    "step_wise_grpo": EstimatorNeeds(), "gigpo": EstimatorNeeds(turns=True), "step_reinforce": EstimatorNeeds(turns=True),
    "step_reward": EstimatorNeeds(turns=True),
    "optimal_token_baseline": EstimatorNeeds(sum_pi_squared=True),
    "tir_optimal_token_baseline": EstimatorNeeds(sum_pi_squared=True),
}


def test_every_registered_estimator_and_alias_declares_its_needs():
    assert set(NEEDS) == set(ADVANTAGE_ESTIMATORS), "add the new estimator to NEEDS"
    assert {name: estimator_needs(name) for name in NEEDS} == NEEDS


def test_an_unknown_estimator_is_refused_with_the_valid_names():
    with pytest.raises(ConfigError, match="algorithm.adv_estimator: unknown advantage estimator 'gea'.*did you mean 'gae'"):
        estimator_needs("gea")


def test_needs_must_be_declared_with_the_record():
    with pytest.raises(TypeError, match="EstimatorNeeds"):
        register_advantage_estimator("needs_as_a_dict", needs={"values": True})  # type: ignore[arg-type]


@pytest.mark.parametrize("overrides, expected", [
    ([], RoleNeeds()),
    (["algorithm.adv_estimator=gae"], RoleNeeds(critic=True)),
    (["algorithm.adv_estimator=ppo"], RoleNeeds(critic=True)),
    (["algorithm.adv_estimator=remax"], RoleNeeds(greedy_baseline=True)),
    (["actor.use_kl_loss=true"], RoleNeeds(reference=True)),
    (["algorithm.use_kl_in_reward=true", "algorithm.adv_estimator=ppo"], RoleNeeds(critic=True, reference=True)),
    (["algorithm.kind=sft", "algorithm.adv_estimator=ppo"], RoleNeeds()),
])
def test_role_needs_follow_the_registry_and_the_kl_switches(overrides, expected):
    assert role_needs(load_config(None, overrides)) == expected


def test_the_critic_batch_rules_and_the_plan_apply_to_an_alias():
    base = ["data.train_batch_size=8", "rollout.n=4", "actor.ppo_mini_batch_size=2", "critic.ppo_mini_batch_size=4"]
    with pytest.raises(ConfigError, match=r"critic.ppo_mini_batch_size \(3\)"):
        load_config(None, [*base, "critic.ppo_mini_batch_size=3", "algorithm.adv_estimator=ppo"])
    cfg = load_config(None, [*base, "algorithm.adv_estimator=ppo"])
    assert [r.role for r in batch_plan(cfg, derive(cfg, 64)).roles] == ["actor", "critic"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("roles"))


def test_adv_estimator_ppo_trains_a_critic_end_to_end(files):
    """The alias users write for PPO builds the critic, feeds its values to GAE and trains it."""
    t = tiny_rl_trainer(
        files, "algorithm.adv_estimator=ppo", "critic.ppo_mini_batch_size=4", "critic.ppo_micro_batch_size_per_gpu=8",
        "trainer.total_training_steps=2", run="ppo",
    )
    assert t.roles.critic is not None and t.roles.reference is None
    before = [p.detach().clone() for p in t.roles.critic.model.parameters()]
    result = t.fit()
    assert result.steps == 2 and result.last_metrics["critic/vf_loss"] > 0
    assert "critic/values/mean" in result.last_metrics
    after = list(t.roles.critic.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), "the critic was not trained"


def test_an_estimator_that_declares_the_reference_gets_one_and_its_log_probs(files):
    saved = dict(registry.ADVANTAGE_ESTIMATORS), list(registry._CANONICAL[id(registry.ADVANTAGE_ESTIMATORS)])
    seen = {}
    try:
        @register_advantage_estimator("grpo_minus_ref", needs=EstimatorNeeds(reference=True))
        def grpo_minus_ref(*, ref_logprobs, response_mask, **kw) -> AdvantageOutput:
            seen["ref_logprobs"] = ref_logprobs
            return grpo_advantage(response_mask=response_mask, **kw)

        assert "grpo_minus_ref" in advantage_estimator_names()
        t = tiny_rl_trainer(files, "algorithm.adv_estimator=grpo_minus_ref", run="ref")
        assert t.roles.reference is not None and t.roles.critic is None
        t.fit()
        assert seen["ref_logprobs"] is not None and seen["ref_logprobs"].shape[0] == 8  # 4 prompts x 2
    finally:
        registry.ADVANTAGE_ESTIMATORS.clear()
        registry.ADVANTAGE_ESTIMATORS.update(saved[0])
        registry._CANONICAL[id(registry.ADVANTAGE_ESTIMATORS)][:] = saved[1]


def test_an_otb_estimator_gets_sum_pi_squared_without_calculate_sum_pi_squared(files):
    """optimal_token_baseline declares sum_pi_squared: the actor computes it although
    actor.calculate_sum_pi_squared is false, the estimator reads it, and the variance proxies log."""
    seen, otb = [], ADVANTAGE_ESTIMATORS["optimal_token_baseline"]

    def spy(**kw):
        seen.append(kw["sum_pi_squared"])
        return otb(**kw)

    spy.needs = otb.needs  # what the trainer reads to decide on the extra pass
    t = tiny_rl_trainer(files, "algorithm.adv_estimator=optimal_token_baseline", "trainer.total_training_steps=2", run="otb")
    assert not t.cfg.actor.calculate_sum_pi_squared
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(ADVANTAGE_ESTIMATORS, "optimal_token_baseline", spy)
        result = t.fit()
    assert result.steps == 2 and len(seen) == 2 and seen[0].shape[0] == 8  # 4 prompts x 2
    assert all(((s > 0) & (s <= 1)).all() for s in seen)  # sum_v pi(v)^2 of a distribution
    assert "variance_proxy/expected_w" in result.last_metrics
