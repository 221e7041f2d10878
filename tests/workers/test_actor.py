"""The actor: recomputed log-probs, micro-batch-invariant PPO gradients, versions, LR steps, clipping."""

from __future__ import annotations

import copy

import pytest
import torch

from posttrain.records import PromptBatch
from posttrain.rollout import HFEngine, SamplingParams
from posttrain.workers import Actor, ReferencePolicy
from worker_helpers import (
    LENGTHS,
    NoSchedule,
    actor_settings,
    assert_same_grads,
    flat,
    grads,
    make_batch,
    noisy,
    sgd_actor,
)

B = len(LENGTHS)
# seq-mean-token-sum-norm gets a fixed constant: with None it would divide by each micro-batch's
# trimmed width, which is a different number per split (rl_build always passes the response length).
AGG_MODES = [
    ("token-mean", None),
    ("token-sum", None),
    ("seq-mean-token-sum", None),
    ("seq-mean-token-mean", None),
    ("seq-mean-token-sum-norm", 16.0),
]
# Token budget 20: rows cost (longest prompt + longest response) x rows, so 1-2 rows per micro-batch.
SPLITS = {
    "micro1": dict(micro_batch_size=1),
    "micro3": dict(micro_batch_size=3),
    "budget": dict(max_tokens_per_micro_batch=20),
    "micro2-shuffled": dict(micro_batch_size=2, shuffle=True),
}
LOSS_TERMS = dict(use_kl_loss=True, kl_loss_coef=0.3, kl_loss_type="low_var_kl", entropy_coeff=0.05)


def prepared_batch(model):
    """A batch with old log-probs off the current policy (so ratios clip), advantages and ref log-probs."""
    batch = make_batch(model.config.vocab_size)
    mask = batch.response_mask
    current = sgd_actor(model).compute_logprobs(batch)
    batch.old_logprobs = noisy(current, mask, 0.3, seed=1)
    batch.ref_logprobs = noisy(current, mask, 0.5, seed=2)
    g = torch.Generator().manual_seed(3)
    batch.advantages = torch.randn(mask.shape, generator=g) * mask  # (B, T)
    return batch


def grads_after_update(base, batch, **settings):
    model = copy.deepcopy(base)
    actor = sgd_actor(model, lr=0.0, **settings)
    metrics = actor.update(batch)
    return grads(model), metrics


@pytest.mark.parametrize("mode,scale", AGG_MODES)
def test_gradient_does_not_depend_on_the_micro_batch_split(policy, mode, scale):
    batch = prepared_batch(policy)
    common = dict(loss_agg_mode=mode, loss_scale_factor=scale, **LOSS_TERMS)
    full, full_metrics = grads_after_update(policy, batch, micro_batch_size=B, **common)
    assert sum(float(g.abs().sum()) for g in full.values()) > 1e-3  # a real gradient, not all zeros
    assert full_metrics["actor/pg_clipfrac"] > 0  # the clipped branch is exercised
    for name, split in SPLITS.items():
        got, metrics = grads_after_update(policy, batch, **common, **split)
        assert_same_grads(full, got)
        # Loss metrics are weighted by the same shares, so they add up to the full mini-batch's.
        for key in ("actor/pg_loss", "actor/entropy", "actor/kl_loss"):
            assert metrics[key] == pytest.approx(full_metrics[key], rel=1e-5, abs=1e-7), (name, key)
        if mode.startswith("token-"):  # token shares: the clip fraction is the mini-batch's token mean
            assert metrics["actor/pg_clipfrac"] == pytest.approx(full_metrics["actor/pg_clipfrac"], rel=1e-5), name
            assert metrics["actor/kl_coef"] == pytest.approx(0.3) == full_metrics["actor/kl_coef"], name


def test_split_invariance_check_catches_unweighted_accumulation(policy, monkeypatch):
    """The test above has teeth: weighting micro-batches by their row share (wrong for token-mean
    with rows of different lengths) changes the gradient far beyond its tolerance."""
    batch = prepared_batch(policy)
    full, _ = grads_after_update(policy, batch, micro_batch_size=B)
    monkeypatch.setattr("posttrain.workers.microbatch.micro_weight", lambda mask, total, mode: mask.shape[0] / B)
    wrong, _ = grads_after_update(policy, batch, micro_batch_size=1)
    with pytest.raises(AssertionError):
        assert_same_grads(full, wrong)


def test_rows_weighting_averages_the_micro_batches_own_token_means_by_their_rows(policy):
    """actor.micro_batch_weight rows (Trinity-RFT's default micro-batch loss scale): the gradient is
    sum_m rows_m / B x the gradient of micro-batch m's own token-mean loss, which depends on the cut
    where the default (the mini-batch's token mean) does not."""
    batch = prepared_batch(policy)
    common = dict(loss_agg_mode="token-mean", **LOSS_TERMS)
    cuts = [(0, 2), (2, 4), (4, 6), (6, 7)]  # micro_batch_size 2 of the B = 7 rows, in order
    assert B == 7 and len({int(batch[a:b].response_mask.sum()) for a, b in cuts}) > 1  # micro-batches of different token counts
    expected = None
    for a, b in cuts:  # each micro-batch alone is its own token mean
        alone, _ = grads_after_update(policy, batch[a:b], mini_batch_size=b - a, micro_batch_size=b - a, **common)
        part = {k: v * (b - a) / B for k, v in alone.items()}
        expected = part if expected is None else {k: expected[k] + part[k] for k in part}
    got, metrics = grads_after_update(policy, batch, micro_batch_size=2, by_rows=True, **common)
    assert_same_grads(expected, got)
    tokens, _ = grads_after_update(policy, batch, micro_batch_size=2, **common)
    with pytest.raises(AssertionError):
        assert_same_grads(tokens, got)
    # one micro-batch: both weightings are the mini-batch's token mean
    whole_rows, _ = grads_after_update(policy, batch, micro_batch_size=B, by_rows=True, **common)
    whole_tokens, _ = grads_after_update(policy, batch, micro_batch_size=B, **common)
    assert_same_grads(whole_tokens, whole_rows)


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-sum"])
def test_full_batch_gradient_is_that_of_the_documented_loss(policy, agg):
    """loss = pg - entropy_coeff * entropy + kl_coef * kl, each aggregated with loss_agg_mode."""
    from posttrain.algorithms import aggregate_loss, kl_penalty, ppo_clip_loss
    from posttrain.models.logprobs import batch_logprobs

    batch = prepared_batch(policy)
    got, _ = grads_after_update(policy, batch, loss_agg_mode=agg, micro_batch_size=2, **LOSS_TERMS)
    model = copy.deepcopy(policy)
    out = batch_logprobs(model, batch, with_entropy=True)
    mask = batch.response_mask
    pg = ppo_clip_loss(
        old_logprob=batch.old_logprobs, logprob=out.logprobs, advantages=batch.advantages, response_mask=mask,
        loss_agg_mode=agg, clip_ratio=0.2, clip_ratio_c=3.0,
    ).loss
    ent = aggregate_loss(out.entropy, mask, agg)
    kl = aggregate_loss(kl_penalty(out.logprobs, batch.ref_logprobs, "low_var_kl"), mask, agg)
    (pg - 0.05 * ent + 0.3 * kl).backward()
    assert_same_grads(grads(model), got)


def test_compute_logprobs_equals_rollout_logprobs(policy):
    engine = HFEngine(policy, eos_token_ids=[], pad_token_id=0, copy_weights=False, seed=3)
    ids = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25], [0, 0, 0, 0, 31]])
    prompts = PromptBatch(ids, (ids > 0).float(), uid=["a", "b", "c"])
    # Stop ids make responses end at different lengths, so padding and trimming are exercised.
    params = SamplingParams(temperature=0.7, n=3, max_new_tokens=10, stop_token_ids=tuple(range(3, 40)))
    out = engine.generate(prompts, params, expected_version=0)
    lengths = out.response_mask.sum(1)
    assert len(set(lengths.tolist())) >= 3 and lengths.min() >= 1
    for split in (dict(micro_batch_size=9), dict(micro_batch_size=2), dict(max_tokens_per_micro_batch=30)):
        actor = sgd_actor(policy, temperature=0.7, **split)
        recomputed = actor.compute_logprobs(out)
        assert recomputed.shape == out.rollout_logprobs.shape
        torch.testing.assert_close(recomputed, out.rollout_logprobs, atol=1e-5, rtol=0)
        assert policy.training  # the actor's train mode is restored
    # Log-probs are of logits / temperature: the wrong temperature gives different numbers.
    wrong = sgd_actor(policy, temperature=1.0, micro_batch_size=9).compute_logprobs(out)
    assert (wrong - out.rollout_logprobs).abs().max() > 1e-2


def test_update_runs_on_the_trainers_inference_mode_tensors(policy):
    """old/ref log-probs come out of torch.inference_mode; the update must accept them as they are."""
    batch = make_batch(policy.config.vocab_size)
    ref = ReferencePolicy(copy.deepcopy(policy), temperature=1.0, micro_batch_size=3)
    actor = sgd_actor(policy, lr=1e-2, **LOSS_TERMS, loss_agg_mode="token-mean")
    batch.old_logprobs = actor.compute_logprobs(batch)
    batch.ref_logprobs = ref.compute_logprobs(batch)
    batch.advantages = torch.linspace(-1, 1, B).unsqueeze(1) * batch.response_mask
    before = flat(policy)
    metrics = actor.update(batch)
    assert (flat(policy) - before).abs().max() > 0
    # At the first step pi == pi_old == pi_ref: no clipping, zero KL, unit ratio.
    assert metrics["actor/pg_clipfrac"] == 0.0
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)


def test_version_counts_optimizer_steps_and_scheduler_counts_updates(policy):
    batch = prepared_batch(policy)
    sched = NoSchedule()
    # 7 rows in mini-batches of 3 -> 3 optimizer steps per epoch, 2 epochs.
    actor = sgd_actor(policy, lr=1e-3, scheduler=sched, ppo_epochs=2, mini_batch_size=3, micro_batch_size=2)
    assert actor.version == 0
    actor.update(batch)
    assert actor.version == 6 and sched.steps == 1
    actor.update(batch)
    assert actor.version == 12 and sched.steps == 2


def test_lr_scheduler_steps_once_per_update(policy):
    batch = prepared_batch(policy)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    actor = Actor(policy, opt, sched, actor_settings(ppo_epochs=2, mini_batch_size=2))
    metrics = actor.update(batch)
    assert metrics["actor/lr"] == pytest.approx(0.1)  # every optimizer step of the update ran at 0.1
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    assert actor.update(batch)["actor/lr"] == pytest.approx(0.05)


def test_lr_schedule_unit_update_steps_the_schedule_after_every_optimizer_step(policy):
    """optim.lr_schedule_unit: update (ROLL's clock): 7 rows in mini-batches of 3, 2 epochs -> 6
    optimizer steps, each at the LR the schedule had reached, and 6 schedule steps per update."""
    batch = prepared_batch(policy)
    counted = sgd_actor(policy, scheduler=NoSchedule(), ppo_epochs=2, mini_batch_size=3, schedule_per_update=True)
    counted.update(batch)
    assert counted.scheduler.steps == 6
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    actor = Actor(policy, opt, sched, actor_settings(ppo_epochs=2, mini_batch_size=3, schedule_per_update=True))
    metrics = actor.update(batch)
    assert metrics["actor/lr"] == pytest.approx(sum(0.1 * 0.5**k for k in range(6)) / 6)  # the mean over the 6 steps
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**6)


def test_grad_clip_bounds_the_step_and_reports_the_norm_before_clipping(policy):
    batch = prepared_batch(policy)
    full, metrics = grads_after_update(policy, batch)
    norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in full.values())))
    assert metrics["actor/grad_norm"] == pytest.approx(norm, rel=1e-5)

    clip = norm / 10
    model = copy.deepcopy(policy)
    before = flat(model)
    clipped = sgd_actor(model, lr=1.0, grad_clip=clip).update(batch)
    step = float((flat(model) - before).norm())
    assert clipped["actor/grad_norm"] == pytest.approx(norm, rel=1e-5)  # pre-clip norm
    assert step == pytest.approx(clip, rel=1e-4)  # SGD at lr 1 moves by exactly the clipped gradient

    model = copy.deepcopy(policy)
    before = flat(model)
    sgd_actor(model, lr=1.0, grad_clip=None).update(batch)
    assert float((flat(model) - before).norm()) == pytest.approx(norm, rel=1e-4)


def test_update_refuses_incomplete_batches(policy):
    batch = prepared_batch(policy)
    actor = sgd_actor(policy)
    for field in ("old_logprobs", "advantages"):
        incomplete = copy.copy(batch)
        setattr(incomplete, field, None)
        with pytest.raises(ValueError, match="old_logprobs and advantages"):
            actor.update(incomplete)
    no_ref = copy.copy(batch)
    no_ref.ref_logprobs = None
    with pytest.raises(ValueError, match="use_kl_loss needs ref_logprobs"):
        sgd_actor(policy, use_kl_loss=True, kl_loss_coef=0.1).update(no_ref)
    assert actor.version == 0
    sgd_actor(policy).update(no_ref)  # without the KL loss, ref log-probs are not needed


def test_kl_loss_and_entropy_coeff_change_the_gradient(policy):
    batch = prepared_batch(policy)
    plain, _ = grads_after_update(policy, batch)
    for extra in (dict(entropy_coeff=0.05), dict(use_kl_loss=True, kl_loss_coef=0.3)):
        other, _ = grads_after_update(policy, batch, **extra)
        with pytest.raises(AssertionError):
            assert_same_grads(plain, other)


def test_token_sum_norm_without_a_constant_is_refused(policy):
    """None would divide each micro-batch by its own trimmed width: a split-dependent gradient."""
    with pytest.raises(ValueError, match=r"seq-mean-token-sum-norm.*loss_scale_factor"):
        sgd_actor(copy.deepcopy(policy), loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=None)


def test_token_sum_norm_split_dependence_is_real_without_the_constant(policy):
    """Why the refusal matters: aggregate_loss's own None default (the tensor's width) changes
    with trimming, so two splits of the same batch give different losses."""
    from posttrain.algorithms import aggregate_loss
    from posttrain.workers.microbatch import micro_batches, micro_weight, normaliser

    batch = prepared_batch(policy)
    loss_mat = batch.advantages
    mode = "seq-mean-token-sum-norm"
    full = aggregate_loss(loss_mat, batch.response_mask, mode)
    total = normaliser(batch.response_mask, mode)
    split = sum(
        micro_weight(m.response_mask, total, mode) * aggregate_loss(m.advantages, m.response_mask, mode)
        for m in micro_batches(batch, size=1, max_tokens=None)
    )
    assert abs(float(split) - float(full)) > 1e-3


def corrected_batch(model):
    """`prepared_batch` plus rollout importance weights and a loss mask with rejected tokens (one
    whole row, and single tokens inside others), as `correct_rollout_mismatch` leaves them."""
    batch = prepared_batch(model)
    mask = batch.response_mask
    g = torch.Generator().manual_seed(4)
    batch.rollout_is_weights = (0.2 + 1.6 * torch.rand(mask.shape, generator=g)) * mask
    keep = mask.clone()
    keep[0, 1] = 0.0
    keep[2, 3:5] = 0.0
    keep[4] = 0.0  # a vetoed sequence
    batch.loss_mask = keep
    return batch


@pytest.mark.parametrize("mode,scale", AGG_MODES)
def test_rollout_correction_weights_the_policy_loss_and_drops_rejected_tokens(policy, mode, scale):
    """With rollout IS the loss is pg(weights, keep) - c_e entropy(keep) + c_kl kl(keep): the weights
    scale the policy loss only, and rejected tokens leave every term and its normaliser; the
    gradient still does not depend on the micro-batch split."""
    from posttrain.algorithms import aggregate_loss, kl_penalty, ppo_clip_loss
    from posttrain.models.logprobs import batch_logprobs

    batch = corrected_batch(policy)
    common = dict(loss_agg_mode=mode, loss_scale_factor=scale, **LOSS_TERMS)
    got, _ = grads_after_update(policy, batch, micro_batch_size=B, **common)
    model = copy.deepcopy(policy)
    out = batch_logprobs(model, batch, with_entropy=True)
    keep, agg = batch.loss_mask, dict(loss_scale_factor=scale)
    pg = ppo_clip_loss(
        old_logprob=batch.old_logprobs, logprob=out.logprobs, advantages=batch.advantages, response_mask=keep,
        loss_agg_mode=mode, clip_ratio=0.2, clip_ratio_c=3.0, sample_weights=batch.rollout_is_weights, **agg,
    ).loss
    ent = aggregate_loss(out.entropy, keep, mode, **agg)
    kl = aggregate_loss(kl_penalty(out.logprobs, batch.ref_logprobs, "low_var_kl"), keep, mode, **agg)
    (pg - 0.05 * ent + 0.3 * kl).backward()
    assert_same_grads(grads(model), got)
    for name, split in SPLITS.items():
        assert_same_grads(got, grads_after_update(policy, batch, **common, **split)[0])
    plain = prepared_batch(policy)
    with pytest.raises(AssertionError):  # the correction really changes the gradient
        assert_same_grads(got, grads_after_update(policy, plain, micro_batch_size=B, **common)[0])


def test_a_loss_that_requires_scores_gets_each_response_s_summed_token_level_scores(policy):
    """topr_roll splits by score: flipping the scores' signs moves responses between its two terms."""
    from posttrain.config import load_config
    from posttrain.trainer.rl_settings import loss_inputs

    assert "scores" in loss_inputs(load_config(None, ["actor.policy_loss.loss_mode=topr_roll"]))
    assert "scores" not in loss_inputs(load_config(None, ["actor.policy_loss.loss_mode=topr"]))
    batch = prepared_batch(policy)
    batch.old_logprobs = batch.old_logprobs - 0.5 * batch.response_mask  # ratios above 1: truncation binds
    settings = dict(loss_mode="topr_roll", loss_options={}, loss_inputs=frozenset({"scores"}))
    last = (batch.response_mask.cumsum(-1) == batch.response_mask.sum(-1, keepdim=True)) * batch.response_mask
    signs = torch.tensor([1.0, -1.0] * len(last))[: len(last), None]  # (B, 1)
    batch.token_level_scores = last * signs  # (B, T): each response's score at its last token
    first, _ = grads_after_update(policy, batch, **settings)
    batch.token_level_scores = -batch.token_level_scores
    second, _ = grads_after_update(policy, batch, **settings)
    assert any(not torch.allclose(first[k], second[k]) for k in first)


def test_rl_and_sft_loss_coefs_follow_roll_s_formula_for_every_split(policy):
    """loss = rl_loss_coef * (pg + kl_coef * kl) - entropy_coeff * entropy + sft_loss_coef * sft, the SFT
    term averaged over the mini-batch's positive responses however the micro-batches cut them."""
    from posttrain.algorithms import aggregate_loss, kl_penalty, positive_sft_loss, ppo_clip_loss
    from posttrain.models.logprobs import batch_logprobs

    batch = prepared_batch(policy)
    mask = batch.response_mask
    batch.old_logprobs = -0.05 * mask  # each response likely under pi_old: its SFT weight exp(sum) is near 1
    last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) * mask
    scores = torch.tensor([1.0, 0.0, 0.5, -1.0, 2.0, 1.0, 0.0])  # four positive rows of seven
    batch.token_level_scores = last * scores[:, None]  # (B, T): each score at the response's last token
    coefs = dict(rl_loss_coef=0.5, sft_loss_coef=2.0, **LOSS_TERMS)
    got, metrics = grads_after_update(policy, batch, micro_batch_size=B, **coefs)
    model = copy.deepcopy(policy)
    out = batch_logprobs(model, batch, with_entropy=True)
    pg = ppo_clip_loss(old_logprob=batch.old_logprobs, logprob=out.logprobs, advantages=batch.advantages,
                       response_mask=mask, clip_ratio=0.2, clip_ratio_c=3.0).loss
    ent = aggregate_loss(out.entropy, mask, "token-mean")
    kl = aggregate_loss(kl_penalty(out.logprobs, batch.ref_logprobs, "low_var_kl"), mask, "token-mean")
    sft = positive_sft_loss(out.logprobs, batch.old_logprobs, scores, mask)
    (0.5 * (pg + 0.3 * kl) - 0.05 * ent + 2.0 * sft).backward()
    assert_same_grads(grads(model), got)
    assert metrics["actor/sft_loss"] == pytest.approx(float(sft.detach()), rel=1e-5)
    for name in ("micro3", "budget"):  # positives spread unevenly over the micro-batches
        grads_split, split_metrics = grads_after_update(policy, batch, **coefs, **SPLITS[name])
        assert_same_grads(got, grads_split)
        assert split_metrics["actor/sft_loss"] == pytest.approx(float(sft.detach()), rel=1e-5), name
    with pytest.raises(AssertionError):  # the SFT term is a real part of the gradient
        assert_same_grads(got, grads_after_update(policy, batch, micro_batch_size=B, **{**coefs, "sft_loss_coef": 0.0})[0])
