"""The estimators and losses behind Trinity-RFT's algorithm types, on hand-computed tensors."""

import math

import pytest
import torch

from posttrain.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, chord_mu, estimator_needs

LN = math.log


def _t(x):
    return torch.tensor(x, dtype=torch.float32)


def _outcome(scores, groups, width=2):
    rewards = torch.zeros(len(scores), width)
    rewards[:, -1] = _t(scores)
    return dict(token_level_rewards=rewards, response_mask=torch.ones(len(scores), width), group_index=groups)


def test_asymre_shifts_the_group_mean():
    # group a: scores 1, 0 -> mean 0.5, baseline 0.5 - 0.1 = 0.4; group b has one member: baseline 0
    adv, ret = ADVANTAGE_ESTIMATORS["asymre"](**_outcome([1.0, 0.0, 2.0], ["a", "a", "b"]))
    torch.testing.assert_close(adv[:, 0], _t([0.6, -0.4, 2.0]))
    adv, _ = ADVANTAGE_ESTIMATORS["asymre"](**_outcome([1.0, 0.0], ["a", "a"]), baseline_shift=0.2)
    torch.testing.assert_close(adv[:, 1], _t([0.3, -0.7]))


def test_rec_uses_the_population_std():
    # scores 1, 0, 0, 1 in one group: mean 0.5, population std 0.5 (the unbiased one would be 0.577)
    kw = _outcome([1.0, 0.0, 0.0, 1.0], ["g"] * 4)
    adv, _ = ADVANTAGE_ESTIMATORS["rec"](**kw)
    torch.testing.assert_close(adv[:, 0], _t([0.5, -0.5, -0.5, 0.5]))
    adv, _ = ADVANTAGE_ESTIMATORS["rec"](**kw, std_normalize=True, epsilon=0.0)
    torch.testing.assert_close(adv[:, 0], _t([1.0, -1.0, -1.0, 1.0]))


def test_on_policy_distill_is_teacher_minus_student():
    student = _t([[-1.0, -2.0], [-0.5, -3.0]])
    teacher = _t([[-0.5, -2.5], [-0.5, -1.0]])
    mask = _t([[1.0, 1.0], [1.0, 0.0]])
    adv, ret = ADVANTAGE_ESTIMATORS["on_policy_distill"](response_mask=mask, old_logprobs=student, ref_logprobs=teacher, kl_coef=2.0)
    torch.testing.assert_close(adv, _t([[1.0, -1.0], [0.0, 0.0]]))
    torch.testing.assert_close(ret, adv)
    assert estimator_needs("on_policy_distill").reference and estimator_needs("jsd").reference
    with pytest.raises(ValueError, match="teacher"):
        ADVANTAGE_ESTIMATORS["on_policy_distill"](response_mask=mask, old_logprobs=student, ref_logprobs=None)


def test_jsd_on_sampled_token_logprobs():
    s, t = LN(0.2), LN(0.6)  # student and teacher probabilities of the sampled token
    kw = dict(response_mask=_t([[1.0]]), old_logprobs=_t([[s]]), ref_logprobs=_t([[t]]))
    # lambda 0.5: m = 0.4; D = 0.5 (ln 0.6 - ln 0.4) + 0.5 (ln 0.2 - ln 0.4)
    expected = 0.5 * (LN(0.6) - LN(0.4)) + 0.5 * (LN(0.2) - LN(0.4))
    adv, _ = ADVANTAGE_ESTIMATORS["jsd"](**kw)
    assert math.isclose(adv.item(), -expected, rel_tol=1e-5)
    # lambda 0.25: m = 0.25 * 0.6 + 0.75 * 0.2 = 0.3; kl_coef 2
    expected = 0.25 * (LN(0.6) - LN(0.3)) + 0.75 * (LN(0.2) - LN(0.3))
    adv, _ = ADVANTAGE_ESTIMATORS["jsd"](**kw, lambda_coef=0.25, kl_coef=2.0)
    assert math.isclose(adv.item(), -2.0 * expected, rel_tol=1e-5)
    adv0, _ = ADVANTAGE_ESTIMATORS["jsd"](**kw, lambda_coef=0.0)  # pure KL(student || teacher) estimate
    assert math.isclose(adv0.item(), -(s - t), rel_tol=1e-6)


def _loss_args(old, new, adv, mask=None):
    new = torch.tensor(new, requires_grad=True)
    adv = _t(adv)
    return dict(old_logprob=_t(old), logprob=new, advantages=adv, response_mask=torch.ones_like(adv) if mask is None else _t(mask))


def test_sapo_soft_gate_value_and_gradient():
    kw = _loss_args([[0.0, 0.0]], [[LN(1.5), LN(0.5)]], [[1.0, -1.0]])
    loss, m = POLICY_LOSSES["sapo"](**kw, tau_pos=1.0, tau_neg=2.0)
    # f = 4 sigmoid(tau (r - 1)) / tau: token 1 tau 1, r 1.5; token 2 tau 2, r 0.5
    f1 = 4 / (1 + math.exp(-0.5))
    f2 = 4 * (1 / (1 + math.exp(1.0))) / 2
    assert math.isclose(loss.item(), (-f1 * 1.0 + f2 * 1.0) / 2, rel_tol=1e-6)
    loss.backward()  # d(-A f(r))/d log pi = -A f'(r) r, f'(r) = 4 sigma (1 - sigma)
    sig1 = 1 / (1 + math.exp(-0.5))
    sig2 = 1 / (1 + math.exp(1.0))
    expected = [-(4 * sig1 * (1 - sig1)) * 1.5 / 2, (4 * sig2 * (1 - sig2)) * 0.5 / 2]
    torch.testing.assert_close(kw["logprob"].grad, _t([expected]))
    with pytest.raises(ValueError, match="tau_neg"):
        POLICY_LOSSES["sapo"](**kw, tau_pos=1.1, tau_neg=1.0)


def test_sppo_keeps_tokens_inside_the_band():
    # eps 0.3: band [1/1.3 = 0.769, 1.3]; ratios 1.2 (kept), 1.5 (out), 0.7 (out)
    kw = _loss_args([[0.0, 0.0, 0.0]], [[LN(1.2), LN(1.5), LN(0.7)]], [[2.0, 1.0, -1.0]])
    loss, m = POLICY_LOSSES["sppo"](**kw)
    assert math.isclose(loss.item(), -2.0 * LN(1.2) / 3, rel_tol=1e-6)
    assert math.isclose(m["pg_clipfrac"], 2 / 3, rel_tol=1e-6)


def test_rec_filters_weights_and_regularises():
    old, new, adv = [[0.0, 0.0, 0.0]], [[LN(1.5), LN(0.5), LN(1.1)]], [[1.0, -1.0, 1.0]]
    plain, _ = POLICY_LOSSES["rec"](**_loss_args(old, new, adv))
    assert math.isclose(plain.item(), (-LN(1.5) + LN(0.5) - LN(1.1)) / 3, rel_tol=1e-6)  # L = -A log pi
    # two-side band [0.8, 1.2] keeps only the third token
    two, m = POLICY_LOSSES["rec"](**_loss_args(old, new, adv), clip_mode="two-side")
    assert math.isclose(two.item(), -LN(1.1) / 3, rel_tol=1e-6) and math.isclose(m["pg_clipfrac"], 2 / 3, rel_tol=1e-6)
    # one-side: A >= 0 needs r <= 1.2 (token 1 out, token 3 in); A <= 0 needs r >= 0.8 (token 2 out)
    one, _ = POLICY_LOSSES["rec"](**_loss_args(old, new, adv), clip_mode="one-side")
    assert math.isclose(one.item(), -LN(1.1) / 3, rel_tol=1e-6)
    # ring: token 2 (A < 0, r 0.5) is outside the band but not beyond 1 + eps_high'; token 1 neither
    ring, _ = POLICY_LOSSES["rec"](**_loss_args(old, new, adv), clip_mode="ring", epsilon_low_prime=0.4)
    # A >= 0 and r <= 1 - 0.4 = 0.6: no such token; so ring keeps token 3 only
    assert math.isclose(ring.item(), -LN(1.1) / 3, rel_tol=1e-6)
    weighted, _ = POLICY_LOSSES["rec"](**_loss_args(old, new, adv), weight="importance_sampling")
    assert math.isclose(weighted.item(), (-1.5 * LN(1.5) + 0.5 * LN(0.5) - 1.1 * LN(1.1)) / 3, rel_tol=1e-5)
    k2, _ = POLICY_LOSSES["rec"](**_loss_args(old, new, adv), regularizer="k2", regularizer_coef=0.5)
    extra = 0.5 * (LN(1.5) ** 2 + LN(0.5) ** 2 + LN(1.1) ** 2) / 3
    assert math.isclose(k2.item(), plain.item() + extra, rel_tol=1e-5)
    with pytest.raises(ValueError, match="clip_mode"):
        POLICY_LOSSES["rec"](**_loss_args(old, new, adv), clip_mode="gspo-one-side")


def test_importance_sampling_is_unclipped():
    kw = _loss_args([[0.0, 0.0]], [[LN(3.0), LN(0.5)]], [[1.0, -2.0]])
    loss, m = POLICY_LOSSES["importance_sampling"](**kw)
    assert math.isclose(loss.item(), (-3.0 + 1.0) / 2, rel_tol=1e-6) and m["pg_clipfrac"] == 0.0


def test_sft_is_and_sft_phi_weights():
    kw = _loss_args([[0.0, 0.0]], [[LN(0.5), LN(0.2)]], [[0.0, 0.0]])
    loss, _ = POLICY_LOSSES["sft_is"](**kw)
    assert math.isclose(loss.item(), (-0.5 * LN(0.5) - 0.2 * LN(0.2)) / 2, rel_tol=1e-6)
    loss, _ = POLICY_LOSSES["sft_phi"](**kw)  # weights p (1 - p): 0.25, 0.16
    assert math.isclose(loss.item(), (-0.25 * LN(0.5) - 0.16 * LN(0.2)) / 2, rel_tol=1e-6)
    loss, _ = POLICY_LOSSES["sft_phi"](**kw, cutoff_prob=0.4)  # log p capped at ln 0.4
    assert math.isclose(loss.item(), (-0.25 * LN(0.4) - 0.16 * LN(0.2)) / 2, rel_tol=1e-6)


def test_mix_blends_ppo_on_explored_rows_and_sft_on_expert_rows():
    # row 0 explored (ratio 1.5, A 1 -> clipped to 1.2), row 1 expert (log-probs ln .5, ln .25; one padded token)
    kw = _loss_args([[0.0, 0.0], [0.0, 0.0]], [[LN(1.5), 0.0], [LN(0.5), LN(0.25)]], [[1.0, 1.0], [0.0, 0.0]])
    kw["response_mask"] = _t([[1.0, 0.0], [1.0, 1.0]])
    expert = torch.tensor([False, True])
    loss, m = POLICY_LOSSES["mix"](**kw, expert_mask=expert, mu=0.25)
    ppo = -1.2  # the explored row's one token
    sft = (-LN(0.5) - LN(0.25)) / 2
    assert math.isclose(loss.item(), 0.75 * ppo + 0.25 * sft, rel_tol=1e-6)
    assert math.isclose(m["expert_sft_loss"], sft, rel_tol=1e-6) and m["mu"] == 0.25
    only_rl, _ = POLICY_LOSSES["mix"](**kw, expert_mask=torch.tensor([False, False]), mu=0.25)
    # no expert row: the SFT part is 0; the RL part spans the 3 real tokens, two of them with A = 0
    assert math.isclose(only_rl.item(), 0.75 * -1.2 / 3, rel_tol=1e-6)


@pytest.mark.parametrize("name", ["mix", "mix_chord"])
def test_mix_parts_reduce_with_their_own_aggregation_modes(name):
    # row 0 explored (ratio 1.5, A 1 -> clipped 1.2 on its two tokens); rows 1-2 expert, 2 and 1 tokens
    kw = _loss_args([[0.0, 0.0]] * 3, [[LN(1.5), LN(1.5)], [LN(0.5), LN(0.25)], [LN(0.5), 0.0]], [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    kw["response_mask"] = _t([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    args = dict(expert_mask=torch.tensor([False, True, True]), loss_agg_mode="seq-mean-token-sum")
    args.update(dict(mu=0.25) if name == "mix" else dict(global_step=0, mu_peak=0.25, mu_valley=0.25, enable_phi_function=False))
    token_mean_sft = (-LN(0.5) - LN(0.25) - LN(0.5)) / 3
    seq_sum_sft = ((-LN(0.5) - LN(0.25)) + -LN(0.5)) / 2
    loss, m = POLICY_LOSSES[name](**kw, **args, sft_loss_agg_mode="token-mean")
    assert math.isclose(m["expert_sft_loss"], token_mean_sft, rel_tol=1e-6)
    assert math.isclose(loss.item(), 0.75 * -2.4 + 0.25 * token_mean_sft, rel_tol=1e-6)  # PPO part: seq-mean-token-sum
    loss, m = POLICY_LOSSES[name](**kw, **args, grpo_loss_agg_mode="token-mean")
    assert math.isclose(loss.item(), 0.75 * -1.2 + 0.25 * seq_sum_sft, rel_tol=1e-6)  # SFT part: the loss's mode


def test_mix_chord_schedules_mu_and_weights_expert_tokens_by_phi():
    kw = _loss_args([[0.0], [0.0]], [[0.0], [LN(0.5)]], [[1.0], [0.0]])
    expert = torch.tensor([False, True])
    args = dict(expert_mask=expert, mu_warmup_steps=2, mu_decay_steps=4, mu_peak=0.5, mu_valley=0.1)
    loss, m = POLICY_LOSSES["mix_chord"](**kw, global_step=1, **args)
    assert m["mu"] == pytest.approx(0.25)
    # explored row: ratio 1, A 1 -> -1; expert row with phi: -0.25 ln 0.5
    assert math.isclose(loss.item(), 0.75 * -1.0 + 0.25 * (-0.25 * LN(0.5)), rel_tol=1e-6)
    plain, m = POLICY_LOSSES["mix_chord"](**kw, global_step=10, enable_phi_function=False, **args)
    assert m["mu"] == pytest.approx(0.1) and math.isclose(plain.item(), 0.9 * -1.0 + 0.1 * -LN(0.5), rel_tol=1e-6)
    assert chord_mu(4, 2, 4, 0.5, 0.1) == pytest.approx(0.3)
