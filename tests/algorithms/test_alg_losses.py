import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import alg_reference as ref
from posttrain.algorithms import POLICY_LOSSES, dpo_loss, get_policy_loss, policy_loss_options

LN = math.log


def base(old, new, adv, mask=None, mode="token-mean"):
    new = torch.tensor(new, requires_grad=True) if not isinstance(new, torch.Tensor) else new
    old = torch.tensor(old) if not isinstance(old, torch.Tensor) else old
    adv = torch.tensor(adv) if not isinstance(adv, torch.Tensor) else adv
    mask = torch.ones_like(adv) if mask is None else mask
    return dict(old_logprob=old, logprob=new, advantages=adv, response_mask=mask, loss_agg_mode=mode)


def test_vanilla_hand_computed_clip_and_dual_clip():
    # ratios 1.5, 0.5, 5.0 with advantages +1, +1, -1; eps 0.2, c 3
    kw = base([[0.0, 0.0, 0.0]], [[LN(1.5), LN(0.5), LN(5.0)]], [[1.0, 1.0, -1.0]])
    loss, m = POLICY_LOSSES["vanilla"](**kw, clip_ratio=0.2)
    # token 1: max(-1.5, -1.2) = -1.2 (clipped); token 2: max(-0.5, -0.8) = -0.5;
    # token 3: max(5, 1.2) = 5 -> dual clip min(5, 3) = 3
    assert math.isclose(loss.item(), (-1.2 - 0.5 + 3.0) / 3, rel_tol=1e-6)
    assert math.isclose(m["pg_clipfrac"], 1 / 3, rel_tol=1e-6)
    assert math.isclose(m["pg_clipfrac_lower"], 1 / 3, rel_tol=1e-6)
    assert math.isclose(m["ppo_kl"], -(LN(1.5) + LN(0.5) + LN(5.0)) / 3, rel_tol=1e-6)
    loss, m = POLICY_LOSSES["vanilla"](**kw, clip_ratio=0.2, clip_ratio_c=None)
    assert math.isclose(loss.item(), (-1.2 - 0.5 + 5.0) / 3, rel_tol=1e-6) and m["pg_clipfrac_lower"] == 0.0


def test_vanilla_clip_higher_is_asymmetric():
    kw = base([[0.0, 0.0]], [[LN(1.25), LN(0.75)]], [[1.0, -1.0]])
    loss, m = POLICY_LOSSES["vanilla"](**kw, clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28)
    # 1.25 < 1.28 is not clipped; 0.75 < 0.8: -A*clip = 0.8 > 0.75 -> clipped
    assert math.isclose(loss.item(), (-1.25 + 0.8) / 2, rel_tol=1e-6)
    assert math.isclose(m["pg_clipfrac"], 0.5)


def test_vanilla_gradient_flows_into_logprob_only():
    kw = base([[0.0, 0.0]], [[0.05, -0.05]], [[1.0, -1.0]])
    kw["old_logprob"].requires_grad_(True)
    kw["advantages"].requires_grad_(True)
    loss, _ = POLICY_LOSSES["vanilla"](**kw)
    loss.backward()
    torch.testing.assert_close(kw["logprob"].grad, torch.tensor([[-math.exp(0.05) / 2, math.exp(-0.05) / 2]]))


def test_vanilla_rejects_bad_dual_clip_and_unknown_option():
    kw = base([[0.0]], [[0.0]], [[1.0]])
    with pytest.raises(ValueError, match="clip_ratio_c"):
        POLICY_LOSSES["vanilla"](**kw, clip_ratio_c=0.5)
    with pytest.raises(TypeError):
        POLICY_LOSSES["vanilla"](**kw, clip_ratoi=0.1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.17, 0.17), st.floats(-3, 3)), min_size=1, max_size=8))
def test_clipped_equals_unclipped_inside_trust_region(pairs):
    log_ratio = torch.tensor([[p[0] for p in pairs]])  # |log r| < 0.18 keeps r in (0.835, 1.197)
    adv = torch.tensor([[p[1] for p in pairs]])
    kw = base(torch.zeros_like(log_ratio), log_ratio.clone(), adv)
    loss, m = POLICY_LOSSES["vanilla"](**kw, clip_ratio=0.2)
    unclipped = (-adv * log_ratio.exp()).mean()
    assert math.isclose(loss.item(), float(unclipped), rel_tol=1e-5, abs_tol=1e-6)
    assert m["pg_clipfrac"] == 0.0


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_vanilla_matches_loop_reference(seed, mode):
    g = torch.Generator().manual_seed(seed)
    old, new, adv = (torch.randn(4, 5, generator=g) * s for s in (0.5, 0.5, 1.0))
    mask = (torch.rand(4, 5, generator=g) > 0.3).float()
    mask[0] = 0.0  # a fully masked row
    mask[1, 0] = 1.0
    loss, _ = POLICY_LOSSES["vanilla"](**base(old, new, adv, mask, mode), clip_ratio_low=0.2, clip_ratio_high=0.3)
    expected = ref.agg(ref.ppo_token_loss(old, new, adv, 0.2, 0.3, 3.0), mask, mode)
    assert math.isclose(loss.item(), expected, rel_tol=1e-5, abs_tol=1e-6)


def test_bf16_inputs_give_fp32_loss():
    kw = base([[0.0, 0.1]], [[0.05, -0.05]], [[1.0, -1.0]])
    l32, _ = POLICY_LOSSES["vanilla"](**kw)
    kw16 = {k: (v.bfloat16() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    l16, _ = POLICY_LOSSES["vanilla"](**kw16)
    assert l16.dtype == torch.float32
    assert abs(l16.item() - l32.item()) < 2e-3  # bf16 input rounding only


def test_gspo_uses_sequence_ratio():
    # one sequence of two tokens, log ratios 0.2 and 0.0 -> sequence ratio exp(0.1)
    kw = base([[0.0, 0.0]], [[0.2, 0.0]], [[1.0, 1.0]])
    loss, m = POLICY_LOSSES["gspo"](**kw, clip_ratio=0.2)
    assert math.isclose(loss.item(), -math.exp(0.1), rel_tol=1e-6)
    loss.backward()
    # gradient of sg[s] * exp(logp - sg[logp]) is s for each token, averaged over 2 tokens
    torch.testing.assert_close(kw["logprob"].grad, torch.full((1, 2), -math.exp(0.1) / 2))
    loss, m = POLICY_LOSSES["gspo"](**base([[0.0, 0.0]], [[0.2, 0.0]], [[1.0, 1.0]]), clip_ratio=0.05)
    assert math.isclose(loss.item(), -1.05, rel_tol=1e-6) and m["pg_clipfrac"] == 1.0


def test_cispo_clips_weight_but_keeps_gradient():
    kw = base([[0.0, 0.0]], [[LN(2.0), LN(0.5)]], [[1.0, -1.0]])
    loss, m = POLICY_LOSSES["cispo"](**kw, clip_ratio=0.2)
    # -(1.2 * 1 * ln2) and -(0.8 * -1 * ln 0.5)
    expected = (-(1.2 * LN(2.0)) + 0.8 * LN(0.5)) / 2
    assert math.isclose(loss.item(), expected, rel_tol=1e-6)
    assert m["pg_clipfrac"] == 1.0
    loss.backward()
    torch.testing.assert_close(kw["logprob"].grad, torch.tensor([[-1.2 / 2, 0.8 / 2]]))


def test_gpg_and_opmd_are_plain_policy_gradient():
    kw = base([[0.0, 0.0]], [[-1.0, -2.0]], [[1.0, -0.5]])
    loss, m = POLICY_LOSSES["gpg"](**kw)
    assert math.isclose(loss.item(), (1.0 - 1.0) / 2, abs_tol=1e-7)
    loss, _ = POLICY_LOSSES["opmd"](**kw, tau=1.0)
    assert math.isclose(loss.item(), 0.0, abs_tol=1e-7)
    kw2 = base([[0.0]], [[-1.0]], [[2.0]])
    loss, _ = POLICY_LOSSES["opmd"](**kw2, tau=3.0)
    assert math.isclose(loss.item(), 2.0 / 4.0, rel_tol=1e-6)


def test_topr_trinity_and_roll_variants():
    # token 1 positive advantage (alpha 1); token 2 negative with ratio 2 -> alpha clip(2,0,1) = 1;
    # token 3 negative with ratio 0.5 -> alpha 0.5
    kw = base([[0.0, 0.0, 0.0]], [[-1.0, LN(2.0), LN(0.5)]], [[1.0, -1.0, -2.0]])
    loss, m = POLICY_LOSSES["topr"](**kw)
    expected = (1.0 + LN(2.0) + 0.5 * 2.0 * LN(0.5)) / 3
    assert math.isclose(loss.item(), expected, rel_tol=1e-6)
    assert math.isclose(m["pg_clipfrac"], 1 / 3, rel_tol=1e-6)
    # ROLL: split by sequence score; two sequences
    kw = base([[0.0], [0.0]], [[-1.0], [LN(0.5)]], [[1.0], [-2.0]])
    loss, _ = POLICY_LOSSES["topr"](**kw, scores=torch.tensor([1.0, 0.0]), positive_coef=1.0, negative_coef=0.5)
    assert math.isclose(loss.item(), 1.0 + 0.5 * (0.5 * 2.0 * LN(0.5)), rel_tol=1e-6)


def test_topr_roll_splits_by_score_even_where_the_advantage_says_otherwise():
    # response 1: score 0 (negative) with A = +1 and ratio 0.5 -> alpha 0.5; response 2: score 1, A = -2, alpha 1
    kw = base([[0.0], [0.0]], [[LN(0.5)], [LN(2.0)]], [[1.0], [-2.0]])
    loss, m = POLICY_LOSSES["topr_roll"](**kw, scores=torch.tensor([0.0, 1.0]))
    assert math.isclose(loss.item(), -0.5 * 1.0 * LN(0.5) + 2.0 * LN(2.0), rel_tol=1e-6)
    assert math.isclose(m["pg_clipfrac"], 0.5, rel_tol=1e-6)


def test_topr_pg_weighs_both_parts_in_one_aggregate():
    # row 0 scores 1 (positive): two tokens, A 1; row 1 scores 0 (negative): one token, A -1, ratio 0.5 -> alpha 0.5
    kw = base([[LN(0.5), LN(0.5)], [0.0, 0.0]], [[LN(0.5), LN(0.25)], [LN(0.5), 0.0]], [[1.0, 1.0], [-1.0, 0.0]],
              mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    loss, m = POLICY_LOSSES["topr_pg"](**kw, scores=torch.tensor([1.0, 0.0]), positive_coef=2.0, negative_coef=1.0)
    expected = (2 * -LN(0.5) + 2 * -LN(0.25) + 0.5 * LN(0.5)) / 3  # one token mean over the three tokens
    assert math.isclose(loss.item(), expected, rel_tol=1e-6) and math.isclose(m["pg_clipfrac"], 1 / 3, rel_tol=1e-6)
    split, _ = POLICY_LOSSES["topr_roll"](**base(kw["old_logprob"], kw["logprob"].detach(), kw["advantages"], kw["response_mask"]),
                                          scores=torch.tensor([1.0, 0.0]))
    assert math.isclose(split.item(), (-LN(0.5) - LN(0.25)) / 2 + 0.5 * LN(0.5), rel_tol=1e-6)  # ROLL's use_topr_loss: apart


def test_clip_cov_drops_gradient_of_high_covariance_token():
    # token (0,0): A=2, logp=1; others A=0, logp=0 -> cov at (0,0) = (2 - .5)(1 - .25) = 1.125 in (1, 5)
    kw = base(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 0.0]], requires_grad=True),
              torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
    loss, m = POLICY_LOSSES["clip_cov"](**kw, generator=torch.Generator().manual_seed(0))
    assert loss.item() == 0.0 and math.isclose(m["pg_clipfrac"], 0.25)
    loss.backward()
    assert float(kw["logprob"].grad.abs().sum()) == 0.0
    # with the bounds excluding it, the token keeps its loss -2 / 4
    loss, m = POLICY_LOSSES["clip_cov"](**base(kw["old_logprob"], kw["logprob"].detach(), kw["advantages"]),
                                        clip_cov_lb=2.0)
    assert math.isclose(loss.item(), -0.5) and m["pg_clipfrac"] == 0.0


def test_kl_cov_penalises_top_covariance_token():
    old = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    new = torch.tensor([[0.5, 0.0], [0.0, 0.0]])
    adv = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    loss, m = POLICY_LOSSES["kl_cov"](**base(old, new, adv), kl_cov_ratio=0.25, ppo_kl_coef=2.0)
    expected = (-2.0 * math.exp(0.5) + 2.0 * 0.5) / 4
    assert math.isclose(loss.item(), expected, rel_tol=1e-6)
    assert math.isclose(m["ppo_kl"], 0.5 / 4)


def test_sft_is_masked_nll():
    logp = torch.tensor([[-1.0, -3.0], [-2.0, -9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, m = POLICY_LOSSES["sft"](old_logprob=None, logprob=logp, advantages=None, response_mask=mask,
                                   loss_agg_mode="token-mean")
    assert math.isclose(loss.item(), 2.0) and math.isclose(m["nll"], 2.0)
    loss, _ = POLICY_LOSSES["sft"](old_logprob=None, logprob=logp, advantages=None, response_mask=mask,
                                   loss_agg_mode="seq-mean-token-mean")
    assert math.isclose(loss.item(), (2.0 + 2.0) / 2)


def test_dpo_hand_computed_and_interleaved_layout():
    # chosen log-ratio 1, rejected log-ratio -1, beta 0.5 -> z = 1
    out = dpo_loss(torch.tensor([-1.0]), torch.tensor([-4.0]), torch.tensor([-2.0]), torch.tensor([-3.0]), beta=0.5)
    assert math.isclose(out.loss.item(), math.log(1 + math.exp(-1.0)), rel_tol=1e-6)
    assert out.metrics["accuracy"] == 1.0 and math.isclose(out.metrics["chosen_reward"], 0.5)
    smooth = dpo_loss(torch.tensor([-1.0]), torch.tensor([-4.0]), torch.tensor([-2.0]), torch.tensor([-3.0]),
                      beta=0.5, label_smoothing=0.1)
    assert math.isclose(smooth.loss.item(), 0.9 * math.log(1 + math.exp(-1)) + 0.1 * math.log(1 + math.e), rel_tol=1e-6)
    logp = torch.tensor([[-0.5, -0.5], [-2.0, -2.0]], requires_grad=True)
    ref_logp = torch.tensor([[-1.0, -1.0], [-1.5, -1.5]])
    loss, _ = POLICY_LOSSES["dpo"](old_logprob=None, logprob=logp, advantages=None, response_mask=torch.ones(2, 2),
                                   ref_logprob=ref_logp, beta=0.5)
    assert math.isclose(loss.item(), math.log(1 + math.exp(-1.0)), rel_tol=1e-6)
    loss.backward()
    assert logp.grad[0, 0] < 0 < logp.grad[1, 0]  # raise chosen, lower rejected
    with pytest.raises(ValueError, match="odd"):
        POLICY_LOSSES["dpo"](old_logprob=None, logprob=logp[:1], advantages=None, response_mask=torch.ones(1, 2),
                             ref_logprob=ref_logp[:1])


def test_every_loss_reports_the_common_metrics_and_fully_masked_batch_is_zero():
    old, new, adv = torch.zeros(2, 3), torch.zeros(2, 3, requires_grad=True), torch.ones(2, 3)
    for name in ["vanilla", "gspo", "cispo", "gpg", "topr", "opmd", "clip_cov", "kl_cov", "sft"]:
        loss, m = get_policy_loss(name)(old_logprob=old, logprob=new, advantages=adv, response_mask=torch.zeros(2, 3),
                                        loss_agg_mode="token-mean")
        assert {"pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"} <= set(m), name
        assert loss.item() == 0.0 and math.isfinite(loss.item()), name


def test_policy_loss_options_lists_declared_keywords():
    assert {"clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c"} <= policy_loss_options("vanilla")
    assert "beta" in policy_loss_options("dpo") and "ref_logprob" in policy_loss_options("dpo")
    assert "logprob" not in policy_loss_options("gspo")
    assert POLICY_LOSSES["ppo"] is POLICY_LOSSES["vanilla"]


def test_sample_weights_scale_each_sequence_like_roll():
    kw = base([[0.0, 0.0], [0.0, 0.0]], [[-1.0, -1.0], [-2.0, -2.0]], [[1.0, 1.0], [1.0, 1.0]])
    w = torch.tensor([0.5, 1.5])
    for name in ("vanilla", "cispo", "gpg"):
        loss, _ = POLICY_LOSSES[name](**kw, sample_weights=w)
        plain, _ = POLICY_LOSSES[name](**kw)
        per_token = torch.stack([POLICY_LOSSES[name](**base(kw["old_logprob"][i:i + 1], kw["logprob"].detach()[i:i + 1],
                                                             kw["advantages"][i:i + 1])).loss for i in range(2)])
        assert loss.item() == pytest.approx(float((per_token * w).mean()), rel=1e-6), name
        assert plain.item() == pytest.approx(float(per_token.mean()), rel=1e-6), name


def test_positive_sft_loss_by_hand():
    """ROLL's SFT term: -score x exp(sum old log-prob) x sum log-prob, averaged over positive rows."""
    from posttrain.algorithms import positive_sft_loss

    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0], [-1.0, -1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-0.5, -0.5, 0.0], [-1.0, 0.0, 0.0], [-0.1, -0.1, -0.1]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    scores = torch.tensor([2.0, 0.0, 1.0])  # row 1 scored 0: no SFT term
    loss = positive_sft_loss(logp, old, scores, mask)
    # row 0: -2 * e^-1 * -3 = 6 e^-1; row 2: -1 * e^-0.3 * -3 = 3 e^-0.3; two positive rows
    assert float(loss) == pytest.approx((6 * math.exp(-1) + 3 * math.exp(-0.3)) / 2)
    loss.backward()
    expected = torch.tensor([[-math.exp(-1), -math.exp(-1), 0.0], [0.0, 0.0, 0.0], [-math.exp(-0.3) / 2] * 3])
    torch.testing.assert_close(logp.grad, expected)
    # a mini-batch count of 4 positives divides the same sum by 4; no positive row: 0
    assert float(positive_sft_loss(logp, old, scores, mask, num_positive=4.0)) == pytest.approx((6 * math.exp(-1) + 3 * math.exp(-0.3)) / 4)
    assert float(positive_sft_loss(logp, old, -scores, mask)) == 0.0
    # a positive row whose tokens are all masked out neither adds nor counts
    assert float(positive_sft_loss(logp, old, scores, mask * torch.tensor([[1.0], [1.0], [0.0]]))) == pytest.approx(6 * math.exp(-1))
