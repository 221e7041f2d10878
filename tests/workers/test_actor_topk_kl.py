"""The actor's top-k distillation term (actor.topk_kl): its gradient is that of the documented loss
for every micro-batch split, it joins or replaces the policy loss, and the teacher's top-k comes
from the reference's `compute_topk`."""

from __future__ import annotations

import copy

import pytest
import torch

from posttrain.algorithms import aggregate_loss, topk_forward_kl
from posttrain.errors import DataError
from posttrain.workers import ReferencePolicy
from posttrain.workers.topk_kl import TopkKLSettings
from test_actor import LOSS_TERMS, SPLITS, grads_after_update, prepared_batch
from worker_helpers import assert_same_grads, grads

K = 4


@pytest.fixture
def taught(policy):
    """The prepared batch with a teacher's top-4 (a perturbed copy of the policy) on it."""
    batch = prepared_batch(policy)
    teacher = copy.deepcopy(policy)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    ref = ReferencePolicy(teacher, temperature=1.0, micro_batch_size=3)
    batch.ref_logprobs, batch.teacher_topk_logprobs, batch.teacher_topk_ids = ref.compute_topk(batch, K, 0.8)
    return batch


def _by_hand(model, batch, temperature=1.0, **clamps):
    """token-mean of l_t from the model's full log-softmax (with gradient)."""
    full = []
    for i in range(len(batch)):  # the whole distribution at each response position, one row at a time
        p = int(batch.prompt_mask[i].sum())
        t = int(batch.response_mask[i].sum())
        ids = torch.cat([batch.prompt_ids[i, -p:], batch.response_ids[i, :t]])[None]
        logp = torch.log_softmax(model(ids).logits[0].float() / temperature, -1)[p - 1 : p - 1 + t]  # (t, V)
        row = torch.zeros(batch.response_ids.shape[1], K)
        row[:t] = logp.gather(-1, batch.teacher_topk_ids[i, :t].clone())
        full.append(row)
    student = torch.stack(full)  # (B, T, K)
    values = topk_forward_kl(student, batch.teacher_topk_logprobs.clone(), **clamps).values
    return aggregate_loss(values, batch.response_mask, "token-mean")


def test_teacher_topk_is_sorted_and_at_the_teacher_temperature(taught):
    lp, ids = taught.teacher_topk_logprobs, taught.teacher_topk_ids
    real = taught.response_mask > 0
    assert lp.shape == ids.shape == (*taught.response_ids.shape, K)
    assert bool((lp[real][:, :-1] >= lp[real][:, 1:]).all()) and bool((lp[real] < 0).all())
    assert float(lp[~real].abs().sum()) == 0.0


@pytest.mark.parametrize("split", list(SPLITS))
def test_distillation_only_gradient_is_the_term_s_for_every_split(policy, taught, split):
    topk = TopkKLSettings(K, coef=0.7, policy_loss=False, log_prob_min_clamp=-6.0, loss_max_clamp=3.0)
    got, metrics = grads_after_update(policy, taught, topk_kl=topk, **SPLITS[split])
    model = copy.deepcopy(policy)
    loss = _by_hand(model, taught, log_prob_min_clamp=-6.0, loss_max_clamp=3.0)
    (0.7 * loss).backward()
    assert_same_grads(grads(model), got)
    assert metrics["actor/topk_kl_loss"] == pytest.approx(float(loss.detach()), rel=1e-4)
    assert "actor/pg_loss" not in metrics and 0 < metrics["actor/topk_student_mass"] < 1


def test_with_the_policy_loss_the_term_is_added(policy, taught):
    topk = TopkKLSettings(K, coef=0.5)
    got, _ = grads_after_update(policy, taught, topk_kl=topk, micro_batch_size=2, **LOSS_TERMS)
    without, _ = grads_after_update(policy, taught, micro_batch_size=2, **LOSS_TERMS)
    model = copy.deepcopy(policy)
    only = _by_hand(model, taught)
    (0.5 * only).backward()
    term = grads(model)
    assert_same_grads({k: without[k] + term[k] for k in term}, got)


def test_a_teacher_id_beyond_the_policy_s_vocabulary_is_refused(policy, taught):
    taught.teacher_topk_ids = taught.teacher_topk_ids.clone()
    taught.teacher_topk_ids[0, 0, 0] = policy.config.vocab_size
    with pytest.raises(DataError, match="beyond the policy's vocabulary"):
        grads_after_update(policy, taught, topk_kl=TopkKLSettings(K))
