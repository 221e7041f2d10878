"""The reference policy: the actor's log-probs on the same weights, and weights that never change."""

from __future__ import annotations

import copy

import torch

from posttrain.workers import ReferencePolicy
from worker_helpers import LENGTHS, flat, make_batch, noisy, sgd_actor

B = len(LENGTHS)


def test_reference_equals_actor_on_identical_weights(policy):
    batch = make_batch(policy.config.vocab_size)
    actor = sgd_actor(policy, temperature=0.8, micro_batch_size=B)
    expected = actor.compute_logprobs(batch)
    for kw in (dict(micro_batch_size=B), dict(micro_batch_size=2), dict(micro_batch_size=B, max_tokens=12)):
        ref = ReferencePolicy(copy.deepcopy(policy), temperature=0.8, **kw)
        got = ref.compute_logprobs(batch)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
        assert (got[batch.response_mask == 0] == 0).all()


def test_reference_is_frozen_while_the_actor_trains(policy):
    batch = make_batch(policy.config.vocab_size)
    ref = ReferencePolicy(copy.deepcopy(policy), temperature=1.0, micro_batch_size=3)
    assert not ref.model.training
    assert all(not p.requires_grad for p in ref.model.parameters())
    ref_before, ref_lp = flat(ref.model), ref.compute_logprobs(batch)

    actor = sgd_actor(policy, lr=0.5, use_kl_loss=True, kl_loss_coef=0.1)
    batch.old_logprobs = actor.compute_logprobs(batch)
    batch.ref_logprobs = ref.compute_logprobs(batch)
    batch.advantages = noisy(torch.zeros_like(batch.response_mask), batch.response_mask, 1.0, seed=0)
    actor.update(batch)

    assert (actor.compute_logprobs(batch) - ref_lp).abs().max() > 1e-3  # the actor moved
    assert torch.equal(flat(ref.model), ref_before)  # the reference did not
    assert torch.equal(ref.compute_logprobs(batch), ref_lp)
    assert all(p.grad is None for p in ref.model.parameters())
