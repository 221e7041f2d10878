"""Rollout importance sampling in the RL step (`algorithm.rollout_is*`): wired from the config,
weights and rejection reach the batch, advantages count only kept tokens, bad combinations refused."""

from __future__ import annotations

import pytest
import torch

from posttrain.config.load import load_config
from posttrain.data.examples import collate_prompts
from posttrain.errors import ConfigError
from posttrain.records import RolloutBatch
from posttrain.trainer.advantages import compute_advantages, correct_rollout_mismatch, make_shaping_state
from posttrain.trainer.rl import RLTrainer
from rl_helpers import tiny_rl_files, tiny_rl_trainer


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("tis"))


def trainer(files, *overrides) -> RLTrainer:
    return tiny_rl_trainer(files, *overrides)


def test_a_bf16_engine_step_logs_the_mismatch_and_weights_the_loss(files):
    t = trainer(
        files, "rollout.dtype=bf16", "algorithm.rollout_is_threshold=1.0005", "algorithm.rollout_is=true",
        "algorithm.rollout_is_mode=mask", "algorithm.rollout_is_threshold_lower=0.9995",
    )
    seen = {}
    update = t.roles.actor.update
    t.roles.actor.update = lambda batch, step=0, mini_size=None: seen.setdefault("batch", batch) and update(batch, step, mini_size)  # type: ignore[method-assign]
    rows = t.sampler.next_batch()
    metrics = t.step(collate_prompts([t.train_set[i] for i in rows], t.pad_id), 1)
    batch: RolloutBatch = seen["batch"]
    mask = batch.response_mask
    # The bf16 engine and the fp32 actor disagree a little: weights move off 1, the tight window
    # [0.9995, 1.0005] rejects some tokens, and the step reports it.
    assert metrics["rollout_is/mismatch_kl"] != 0.0 and 0 < metrics["rollout_is/masked_fraction"] < 1
    expected = torch.exp((batch.old_logprobs - batch.rollout_logprobs).clamp(-20, 20)) * mask
    torch.testing.assert_close(batch.rollout_is_weights, expected)
    keep = ((expected >= 0.9995) & (expected <= 1.0005)).float() * mask
    assert torch.equal(batch.loss_mask, keep)
    assert bool(((batch.advantages != 0) & (keep == 0)).sum() == 0)  # rejected tokens get no advantage


def test_rejection_after_the_advantages_leaves_them_counting_every_token(files, tmp_path):
    """algorithm.rollout_reject_after_advantages (ROLL's order): the rejected tokens keep their
    advantage (whitened over every trained token) and leave only the losses; verl's order (the
    default) gives them none, as test_a_bf16_engine_step_logs_the_mismatch_and_weights_the_loss shows."""
    reward = tmp_path / "reward.py"  # scores that vary within a group, so the advantages are not all 0
    reward.write_text("def by_length(data_source, solution_str, ground_truth, extra_info=None):\n    return len(solution_str) / 10.0\n")
    t = trainer(
        files, f"reward.custom_reward_function.path={reward}", "reward.custom_reward_function.name=by_length", "rollout.dtype=bf16", "algorithm.rollout_is_threshold=1.0005", "algorithm.rollout_is_mode=mask",
        "algorithm.rollout_is_threshold_lower=0.9995", "algorithm.whiten_advantages=true",
        "algorithm.adv_estimator=reinforce_plus_plus",  # batch-wide returns: every row's tokens get an advantage
        "algorithm.rollout_reject_after_advantages=true",
    )
    seen = {}
    update = t.roles.actor.update
    t.roles.actor.update = lambda batch, step=0, mini_size=None: seen.setdefault("batch", batch) and update(batch, step, mini_size)  # type: ignore[method-assign]
    rows = t.sampler.next_batch()
    t.step(collate_prompts([t.train_set[i] for i in rows], t.pad_id), 1)
    batch: RolloutBatch = seen["batch"]
    rejected = (batch.loss_mask == 0) & (batch.response_mask > 0)
    assert bool(rejected.any()) and bool((batch.loss_mask > 0).any())
    assert bool((batch.advantages[rejected] != 0).any())
    # whitened over every real token: mean 0 there, not over the kept ones only
    assert float(batch.advantages[batch.response_mask > 0].mean()) == pytest.approx(0.0, abs=1e-5)


def test_metrics_only_by_default_and_off_without_a_threshold(files):
    t = trainer(files, "rollout.dtype=bf16", "algorithm.rollout_is_threshold=2.0")
    b = RolloutBatch(
        prompt_ids=torch.ones(1, 2, dtype=torch.long), prompt_mask=torch.ones(1, 2),
        response_ids=torch.ones(1, 3, dtype=torch.long), response_mask=torch.tensor([[1.0, 1.0, 0.0]]),
        rollout_logprobs=torch.tensor([[-1.0, -1.0, 0.0]]), weights_version=torch.zeros(1, dtype=torch.long),
        group_index=["g"], data_source=["d"], ground_truth=[None], extra_info=[{}], raw_prompt=[""],
    )
    b.old_logprobs = torch.tensor([[-0.5, -3.0, 0.0]])
    keep, metrics = correct_rollout_mismatch(b, t.cfg.algorithm)
    assert b.rollout_is_weights is None and keep is None and b.loss_mask is None  # rollout_is false, truncate, no veto
    assert metrics["rollout_is/mismatch_kl"] == pytest.approx(((-1.0 + 0.5) + (-1.0 + 3.0)) / 2)


def test_advantages_count_kept_tokens_and_scores_stay_at_the_last_real_token(files):
    t = trainer(files, "algorithm.adv_estimator=grpo")
    b = RolloutBatch(
        prompt_ids=torch.ones(2, 2, dtype=torch.long), prompt_mask=torch.ones(2, 2),
        response_ids=torch.ones(2, 3, dtype=torch.long), response_mask=torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
        rollout_logprobs=torch.zeros(2, 3), weights_version=torch.zeros(2, dtype=torch.long),
        group_index=["g", "g"], data_source=["d"] * 2, ground_truth=[None] * 2, extra_info=[{}, {}], raw_prompt=[""] * 2,
    )
    b.old_logprobs = torch.zeros(2, 3)
    b.loss_mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])  # a rejected token, a vetoed row
    compute_advantages(b, torch.tensor([1.0, 0.0]), t.cfg.algorithm, make_shaping_state(t.cfg.algorithm), 1)
    assert b.token_level_scores.tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    a = 1.0 / (torch.tensor([1.0, 0.0]).std() + 1e-6)  # GRPO: (1 - 0.5) / std of the group's scores
    torch.testing.assert_close(b.advantages, torch.tensor([[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]) * a)


@pytest.mark.parametrize("overrides,needle", [
    (["algorithm.rollout_is=true"], "need(s) algorithm.rollout_is_threshold"),
    (["algorithm.rollout_is_mode=mask"], "need(s) algorithm.rollout_is_threshold"),
    (["algorithm.rollout_is_threshold=2", "algorithm.rollout_is_threshold_lower=0.5"], "only read by algorithm.rollout_is_mode mask or zero"),
    (["algorithm.rollout_is_threshold=2", "algorithm.rollout_is_mode=zero"], "algorithm.rollout_is=false leaves the weights out of the loss"),
    (["algorithm.rollout_is_threshold=2", "algorithm.rollout_is_mode=mask", "algorithm.rollout_is_threshold_lower=3"], "must not exceed"),
    (["algorithm.rollout_is_threshold=2", "actor.reuse_rollout_logprobs=always"], "every weight would be 1"),
    (["algorithm.rollout_is_threshold=2", "algorithm.rollout_reject_after_advantages=true"], "nothing rejects"),
    (["algorithm.rollout_reject_after_advantages=true"], "need(s) algorithm.rollout_is_threshold"),
])
def test_combinations_that_would_do_nothing_are_refused(overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, overrides)
