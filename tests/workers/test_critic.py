"""The critic: values at the actor's positions, the clipped value loss, micro-batch invariance."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from posttrain.algorithms import value_loss
from posttrain.models.positions import concat_prompt_response
from posttrain.workers import Critic
from worker_helpers import (
    LENGTHS,
    NoSchedule,
    assert_same_grads,
    critic_settings,
    flat,
    grads,
    make_batch,
    noisy,
    sgd_critic,
)

B = len(LENGTHS)


def values_by_hand(model, batch) -> torch.Tensor:
    """The value model's own full forward: V(s_t) is the head's output at column P - 1 + t."""
    input_ids, attention_mask, position_ids = concat_prompt_response(
        batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
    )
    P, T = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits[..., 0]
    return logits[:, P - 1 : P - 1 + T] * batch.response_mask  # (B, T)


def with_targets(batch, values, shift: float = 0.0, seed: int = 5):
    batch.values = values
    g = torch.Generator().manual_seed(seed)
    batch.returns = (values + shift + torch.randn(values.shape, generator=g)) * batch.response_mask
    return batch


def test_values_sit_where_the_actor_reads_log_probs(value_model):
    batch = make_batch(value_model.config.vocab_size)
    expected = values_by_hand(value_model, batch)
    assert expected[batch.response_mask > 0].abs().min() > 0  # a real comparison, not zeros
    for size in (B, 2, 1):
        got = sgd_critic(value_model, micro_batch_size=size).compute_values(batch)
        assert got.shape == batch.response_ids.shape and got.dtype == torch.float32
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        assert (got[batch.response_mask == 0] == 0).all()


def test_update_lowers_the_value_loss_on_a_fixed_batch(value_model):
    batch = make_batch(value_model.config.vocab_size)
    opt = torch.optim.Adam(value_model.parameters(), lr=1e-2)
    critic = Critic(value_model, opt, NoSchedule(), critic_settings(cliprange_value=None, ppo_epochs=2, micro_batch_size=3))
    with_targets(batch, critic.compute_values(batch), shift=1.0)

    def loss_now() -> float:
        return float(value_loss(critic.compute_values(batch), batch.values, batch.returns, batch.response_mask, None).loss)

    start = loss_now()
    for _ in range(6):
        metrics = critic.update(batch)
        assert metrics["critic/vf_clipfrac"] == 0.0  # no clipping without a clip range
    assert loss_now() < 0.5 * start
    assert critic.scheduler.steps == 6


def test_lr_schedule_unit_update_steps_the_critics_schedule_per_optimizer_step(value_model):
    batch = make_batch(value_model.config.vocab_size)
    per_update = Critic(value_model, torch.optim.SGD(value_model.parameters(), lr=0.0), NoSchedule(),
                        critic_settings(ppo_epochs=2, mini_batch_size=2, schedule_per_update=True))
    with_targets(batch, per_update.compute_values(batch))
    per_update.update(batch)
    minis = -(-batch.response_mask.shape[0] // 2)
    assert per_update.scheduler.steps == 2 * minis
    per_step = sgd_critic(value_model, ppo_epochs=2, mini_batch_size=2)
    per_step.update(batch)
    assert per_step.scheduler.steps == 1


def test_first_step_reports_the_hand_computed_loss(value_model):
    """At the first step new values equal the rollout values: loss 0.5 * token-mean (V - R)^2, no clip."""
    batch = make_batch(value_model.config.vocab_size)
    critic = sgd_critic(value_model, lr=0.0, micro_batch_size=2, cliprange_value=0.1)
    with_targets(batch, critic.compute_values(batch))
    mask = batch.response_mask
    expected = 0.5 * float((((batch.values - batch.returns) ** 2) * mask).sum() / mask.sum())
    metrics = critic.update(batch)
    assert metrics["critic/vf_loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["critic/vf_clipfrac"] == 0.0


def test_small_clip_range_clips_far_returns(value_model):
    batch = make_batch(value_model.config.vocab_size)
    opt = torch.optim.Adam(value_model.parameters(), lr=1e-2)
    critic = Critic(value_model, opt, NoSchedule(), critic_settings(cliprange_value=0.01, ppo_epochs=3))
    with_targets(batch, critic.compute_values(batch), shift=5.0)
    metrics = critic.update(batch)
    # After the first step the values have moved more than 0.01 toward the returns, so the clipped
    # term (pinned at V_old + 0.01) is the larger one: the loss stops pulling them further.
    assert metrics["critic/vf_clipfrac"] > 0.3
    moved = critic.compute_values(batch) - batch.values
    assert float(moved[batch.response_mask > 0].mean()) > 0.01


@pytest.mark.parametrize("mode", ["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_critic_gradient_does_not_depend_on_the_micro_batch_split(value_model, mode):
    batch = make_batch(value_model.config.vocab_size)
    current = sgd_critic(value_model).compute_values(batch)
    # Old values off the current ones so that the clip range binds on some tokens.
    with_targets(batch, noisy(current, batch.response_mask, 0.3, seed=7))
    scale = 16.0 if mode == "seq-mean-token-sum-norm" else None  # its constant: the max response length

    def run(size, max_tokens=None):
        model = copy.deepcopy(value_model)
        critic = sgd_critic(
            model, lr=0.0, micro_batch_size=size, cliprange_value=0.2, loss_agg_mode=mode, loss_scale_factor=scale,
            max_tokens_per_micro_batch=max_tokens,
        )
        metrics = critic.update(batch)
        return grads(model), metrics

    full, full_metrics = run(B)
    assert 0 < full_metrics["critic/vf_clipfrac"] < 1
    longest = int((batch.prompt_mask.sum(1) + batch.response_mask.sum(1)).max())
    for size, max_tokens in ((1, None), (3, None), (B, longest)):  # counts, and a token budget (critic.use_dynamic_bsz)
        got, metrics = run(size, max_tokens)
        assert_same_grads(full, got)
        assert metrics["critic/vf_loss"] == pytest.approx(full_metrics["critic/vf_loss"], rel=1e-5)


def test_critic_rows_weighting_averages_the_micro_batches_own_means_by_their_rows(value_model):
    """critic.micro_batch_weight rows (verl 0.8's legacy critic, Trinity-RFT's): sum_m rows_m / B x the
    gradient of micro-batch m's own token-mean value loss."""
    batch = make_batch(value_model.config.vocab_size)
    with_targets(batch, noisy(sgd_critic(value_model).compute_values(batch), batch.response_mask, 0.3, seed=7))

    def run(part, size, **kw):
        model = copy.deepcopy(value_model)
        sgd_critic(model, lr=0.0, mini_batch_size=len(part), micro_batch_size=size, cliprange_value=0.2, **kw).update(part)
        return grads(model)

    expected = None
    for a, b in ((0, 3), (3, 6), (6, 7)):  # micro_batch_size 3 of the 7 rows, in order
        part = {k: v * (b - a) / B for k, v in run(batch[a:b], b - a).items()}
        expected = part if expected is None else {k: expected[k] + part[k] for k in part}
    got = run(batch, 3, by_rows=True)
    assert_same_grads(expected, got)
    with pytest.raises(AssertionError):  # the default: the mini-batch's token mean, another gradient
        assert_same_grads(run(batch, 3), got)


def test_critic_grad_clip_and_refusal(value_model):
    batch = make_batch(value_model.config.vocab_size)
    with_targets(batch, sgd_critic(value_model).compute_values(batch), shift=2.0)
    with pytest.raises(ValueError, match="values and returns"):
        sgd_critic(value_model).update(dataclasses.replace(batch, returns=None))
    model = copy.deepcopy(value_model)
    before = flat(model)
    metrics = sgd_critic(model, lr=1.0, grad_clip=1e-3).update(batch)
    assert metrics["critic/grad_norm"] > 1e-2  # reported before clipping
    assert float((flat(model) - before).norm()) == pytest.approx(1e-3, rel=1e-3)
