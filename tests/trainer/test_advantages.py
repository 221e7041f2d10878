"""compute_advantages: reward shaping, KL in reward and the estimator on hand-made batches."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posttrain.config.sections.algorithm import AlgorithmConfig
from posttrain.records import RolloutBatch
from posttrain.trainer.advantages import compute_advantages, make_shaping_state

# Two groups of three responses; lengths 3, 1, 2 | 2, 3, 1 (T = 3).
MASK = torch.tensor(
    [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
)
GROUPS = ["a", "a", "a", "b", "b", "b"]
SCORES = torch.tensor([1.0, 0.0, 0.0, 2.0, -4.0, 0.5])


def batch(mask=MASK, groups=GROUPS) -> RolloutBatch:
    B, T = mask.shape
    return RolloutBatch(
        prompt_ids=torch.ones(B, 2, dtype=torch.long),
        prompt_mask=torch.ones(B, 2),
        response_ids=torch.ones(B, T, dtype=torch.long),
        response_mask=mask,
        rollout_logprobs=torch.zeros(B, T),
        weights_version=torch.zeros(B, dtype=torch.long),
        group_index=list(groups),
        data_source=["toy"] * B,
        ground_truth=[None] * B,
        extra_info=[{} for _ in range(B)],
        raw_prompt=[""] * B,
    )


def alg(**kw) -> AlgorithmConfig:
    return dataclasses.replace(AlgorithmConfig(), **kw)


def run(b, scores, a):
    state = make_shaping_state(a)
    metrics = compute_advantages(b, scores, a, state, n_steps=len(b))
    return metrics, state


def last_token_values(t: torch.Tensor) -> torch.Tensor:
    last = (MASK * torch.arange(1, 4)).argmax(1)  # (B,)
    return t[torch.arange(len(t)), last]


def test_grpo_numbers_broadcast_over_valid_tokens():
    b = batch()
    run(b, SCORES, alg(adv_estimator="grpo"))
    group_a = torch.tensor([1.1547, -0.5774, -0.5774])
    torch.testing.assert_close(b.advantages[:3], group_a.unsqueeze(1) * MASK[:3], atol=1e-4, rtol=0)
    assert (b.advantages[MASK == 0] == 0).all()
    torch.testing.assert_close(b.returns, b.advantages)
    # The score sits on the last valid token; without KL, rewards are the scores.
    torch.testing.assert_close(last_token_values(b.token_level_scores), SCORES)
    assert float(b.token_level_scores.sum()) == pytest.approx(float(SCORES.sum()))
    torch.testing.assert_close(b.token_level_rewards, b.token_level_scores)


def test_dr_grpo_only_centres():
    b = batch()
    run(b, SCORES, alg(norm_adv_by_std_in_grpo=False))
    torch.testing.assert_close(b.advantages[:3, 0], torch.tensor([2 / 3, -1 / 3, -1 / 3]))


def test_reward_clip():
    b = batch()
    metrics, _ = run(b, SCORES, alg(reward_clip=1.0))
    torch.testing.assert_close(last_token_values(b.token_level_scores), torch.tensor([1.0, 0.0, 0.0, 1.0, -1.0, 0.5]))
    assert metrics["critic/reward_clip_frac"] == pytest.approx(2 / 6)


def test_reward_norm_by_group():
    b = batch()
    run(b, SCORES, alg(reward_norm_mean="group", reward_norm_std="group"))
    shaped = last_token_values(b.token_level_scores)
    torch.testing.assert_close(shaped[:3], torch.tensor([1.1547, -0.5774, -0.5774]), atol=1e-4, rtol=0)
    # group b: mean -0.5, unbiased std sqrt(((2.5)^2 + 3.5^2 + 1^2) / 2) = sqrt(9.75)
    expected_b = (SCORES[3:] + 0.5) / (9.75**0.5 + 1e-6)
    torch.testing.assert_close(shaped[3:], expected_b)
    b = batch()
    run(b, SCORES, alg(reward_norm_mean="group"))  # mean only
    torch.testing.assert_close(last_token_values(b.token_level_scores), torch.tensor([2 / 3, -1 / 3, -1 / 3, 2.5, -3.5, 1.0]))


def test_running_reward_norm_updates_the_state():
    b = batch()
    _, state = run(b, SCORES, alg(reward_norm_mean="running", reward_norm_std="running"))
    assert state.running.mean == pytest.approx(float(SCORES.mean()))
    expected = (SCORES - SCORES.mean()) / (SCORES.std() + 1e-6)
    torch.testing.assert_close(last_token_values(b.token_level_scores), expected, atol=1e-5, rtol=1e-5)


def test_whiten_advantages():
    b = batch()
    run(b, SCORES, alg(whiten_advantages=True))
    valid = b.advantages[MASK > 0]
    assert float(valid.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(valid.var()) == pytest.approx(1.0, rel=1e-5)  # unbiased, over valid tokens
    assert (b.advantages[MASK == 0] == 0).all()


def test_whiten_rewards():
    b = batch()
    run(b, SCORES, alg(whiten_rewards=True))
    valid = b.token_level_rewards[MASK > 0]
    assert float(valid.mean()) == pytest.approx(0.0, abs=1e-6) and float(valid.var()) == pytest.approx(1.0, rel=1e-5)
    assert (b.token_level_rewards[MASK == 0] == 0).all()


def test_advantage_clip():
    b = batch()
    metrics, _ = run(b, SCORES, alg(advantage_clip=0.6))
    assert float(b.advantages.abs().max()) == pytest.approx(0.6)
    torch.testing.assert_close(b.advantages[0], torch.full((3,), 0.6))
    torch.testing.assert_close(b.advantages[1], torch.tensor([-0.5774, 0.0, 0.0]), atol=1e-4, rtol=0)
    assert (b.advantages[MASK == 0] == 0).all()
    assert "critic/advantage_clip_frac" in metrics and metrics["critic/advantage_clip_frac"] > 0


def kl_batch():
    b = batch()
    g = torch.Generator().manual_seed(0)
    b.old_logprobs = -torch.rand(MASK.shape, generator=g) * MASK
    b.ref_logprobs = -torch.rand(MASK.shape, generator=g) * MASK
    return b


def test_fixed_kl_in_reward():
    b = kl_batch()
    a = alg(use_kl_in_reward=True, kl_penalty="kl", kl_ctrl=dataclasses.replace(AlgorithmConfig().kl_ctrl, kl_coef=0.5))
    metrics, state = run(b, SCORES, a)
    kl = (b.old_logprobs - b.ref_logprobs) * MASK
    torch.testing.assert_close(b.token_level_rewards, b.token_level_scores - 0.5 * kl)
    assert (b.token_level_rewards[MASK == 0] == 0).all()
    mean_kl = float(((kl.sum(1) / MASK.sum(1))).mean())
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(mean_kl, rel=1e-5)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.5
    assert state.kl_ctrl.value == 0.5
    # GRPO then sees the KL-reduced sequence rewards.
    sums = b.token_level_rewards.sum(1)
    expected_a = (sums[:3] - sums[:3].mean()) / (sums[:3].std() + 1e-6)
    torch.testing.assert_close(b.advantages[:3, 0], expected_a, atol=1e-5, rtol=1e-5)


def test_adaptive_kl_in_reward_moves_the_coefficient():
    b = kl_batch()
    ctrl = dataclasses.replace(AlgorithmConfig().kl_ctrl, type="adaptive", kl_coef=0.1, target_kl=1e-3, horizon=10)
    metrics, state = run(b, SCORES, alg(use_kl_in_reward=True, kl_penalty="abs", kl_ctrl=ctrl))
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1  # this step used the old value
    # KL far above target: error clipped to 0.2; beta *= 1 + 0.2 * n_steps / horizon with n_steps = 6.
    assert state.kl_ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 6 / 10))


def test_no_kl_controller_without_kl_in_reward():
    assert make_shaping_state(alg()).kl_ctrl is None


def test_gae_uses_the_critic_values():
    b = batch()
    b.values = torch.tensor([[0.5, 0.25, 0.125]]).expand(6, 3) * MASK
    run(b, SCORES, alg(adv_estimator="gae", gamma=1.0, lam=1.0))
    # gamma = lam = 1: returns are the reward-to-go (the score on every valid token), A = R - V,
    # then whitened over the valid tokens (verl's GAE).
    torch.testing.assert_close(b.returns, SCORES.unsqueeze(1) * MASK)
    raw = (b.returns - b.values)[MASK > 0]
    torch.testing.assert_close(b.advantages[MASK > 0], (raw - raw.mean()) / (raw.var() + 1e-8).sqrt())
