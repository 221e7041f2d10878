"""ROLL's loss keys of the actor: rl_loss_coef, sft_loss_coef (and where they do not apply)."""

import math

import pytest
import torch

from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.errors import ConfigError


def test_roll_s_loss_coefficients_land_on_the_actor():
    native, report = translate({"rl_loss_coef": 0.5, "sft_loss_coef": 0.1}, "roll")
    assert not report.refused
    assert native["actor"]["rl_loss_coef"] == 0.5 and native["actor"]["sft_loss_coef"] == 0.1


def test_the_rl_loss_weights_are_refused_for_a_supervised_stage():
    with pytest.raises(ConfigError, match=r"actor.sft_loss_coef=0.1: these act on the RL loss and algorithm.kind sft"):
        load_config(None, ["algorithm.kind=sft", "actor.sft_loss_coef=0.1"])
    with pytest.raises(ConfigError, match="algorithm.kind dpo has no RL loss"):
        load_config(None, ["algorithm.kind=dpo", "actor.rl_loss_coef=2.0"])
    with pytest.raises(ConfigError, match="actor.calculate_sum_pi_squared=True: these act on the RL loss"):
        load_config(None, ["algorithm.kind=sft", "actor.calculate_sum_pi_squared=true"])
    assert load_config(None, ["actor.sft_loss_coef=0.1", "actor.rl_loss_coef=2.0"]).actor.rl_loss_coef == 2.0


def test_importance_sampling_seq_is_the_gspo_loss_and_token_is_posttrain_s_ratio():
    assert translate({"importance_sampling": "seq"}, "roll")[0]["actor"]["policy_loss"]["loss_mode"] == "gspo"
    native, report = translate({"importance_sampling": "token"}, "roll")
    assert "actor" not in native and report.entry("importance_sampling").status == "dropped"
    native, report = translate({"importance_sampling": "seq", "dual_clip_loss": True, "pg_clip": 0.25}, "roll")
    assert not report.refused
    assert native["actor"]["policy_loss"] == {"loss_mode": "gspo", "loss_args": {"dual_clip_c": 1.5}}
    assert "loss_args" not in translate({"importance_sampling": "seq", "dual_clip_loss": False}, "roll")[0]["actor"]["policy_loss"]
    _, report = translate({"importance_sampling": "seq", "use_topr_loss": True}, "roll")
    assert "conflicts with use_topr_loss" in report.entry("importance_sampling").reason


def test_apply_loss_scale_true_is_posttrain_s_gradient_and_false_is_refused():
    """ROLL multiplies each micro-batch's globally normalised loss by the micro-batch count x ranks to
    cancel the backend's gradient mean (its default): the mini-batch loss's gradient, posttrain's."""
    for role in ("actor_train", "critic"):
        _, report = translate({"pretrain": "/m", role: {"apply_loss_scale": True}}, "roll")
        assert report.entry(f"{role}.apply_loss_scale").status == "dropped"
        _, report = translate({"pretrain": "/m", role: {"apply_loss_scale": False}}, "roll")
        entry = report.entry(f"{role}.apply_loss_scale")
        assert entry.status == "refused" and "max_grad_norm" in entry.reason


def _roll_sequence_ratio_loss(logp, old, adv, mask, eps, agg, dual_clip=False):
    """ROLL's importance_sampling: seq, from its formula: one ratio per response, the exp of the mean
    token log-ratio (its gradient spread over the response's tokens), broadcast to every token; with
    dual_clip_loss its actor's bound min(loss, -(1 + 2 eps) A) where A < 0."""
    from posttrain.algorithms import aggregate_loss

    ratio = torch.exp(((logp - old) * mask).sum(-1) / mask.sum(-1)).unsqueeze(-1).expand_as(logp)  # (B, T)
    loss = -torch.min(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv)
    if dual_clip:
        loss = torch.where(adv < 0, -torch.max(-loss, (1 + 2 * eps) * adv), loss)
    return aggregate_loss(loss, mask, agg)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"])
def test_roll_s_sequence_ratio_has_gspo_s_value_and_gradient(agg):
    from posttrain.algorithms import gspo_loss

    logp = torch.tensor([[-1.0, -1.2, -0.8], [-0.5, -0.7, 0.0]])
    old = torch.tensor([[-1.1, -1.0, -1.0], [-0.6, -0.4, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([[1.0], [-1.0]]) * mask
    got, want = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    gspo = gspo_loss(old_logprob=old, logprob=got, advantages=adv, response_mask=mask, loss_agg_mode=agg, clip_ratio=0.05).loss
    roll = _roll_sequence_ratio_loss(want, old, adv, mask, 0.05, agg)
    if agg == "token-mean":
        # s_0 = exp(0.1 / 3) = 1.0339 inside [0.95, 1.05]: -s_0 on 3 tokens; s_1 = exp(-0.1) = 0.905 < 0.95
        # with A = -1: the clipped 0.95 on 2 tokens (no gradient); over 5 tokens
        assert float(roll.detach()) == pytest.approx((-3 * math.exp(0.1 / 3) + 2 * 0.95) / 5, abs=1e-6)
    assert float(gspo.detach()) == pytest.approx(float(roll.detach()), abs=1e-6)
    gspo.backward()
    roll.backward()
    torch.testing.assert_close(got.grad, want.grad)
    assert float(got.grad[0].abs().sum()) > 0 and float(got.grad[1].abs().sum()) == 0  # row 1 clipped


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_roll_s_sequence_ratio_with_dual_clip_is_gspo_s_dual_clip(agg):
    from posttrain.algorithms import gspo_loss

    # Row 0: A = -1, s_0 = exp(0.5) = 1.6487 > 1 + 2 x 0.2: the dual clip binds at 1.4 (no gradient).
    # Row 1: A = -1, s_1 = exp(0.3) = 1.3499 < 1.4: unclipped -A s_1, gradient flows.
    # Row 2: A = +1, s_2 = exp(0.5): clipped at 1.2 by the ordinary clip, the dual clip never applies.
    logp = torch.tensor([[0.5, 0.5], [0.3, 0.3], [0.5, 0.5]])
    old = torch.zeros(3, 2)
    mask = torch.ones(3, 2)
    adv = torch.tensor([[-1.0], [-1.0], [1.0]]).expand(3, 2)
    got, want = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    out = gspo_loss(old_logprob=old, logprob=got, advantages=adv, response_mask=mask, loss_agg_mode=agg, clip_ratio=0.2, dual_clip_c=1.4)
    roll = _roll_sequence_ratio_loss(want, old, adv, mask, 0.2, agg, dual_clip=True)
    assert float(out.loss.detach()) == pytest.approx((1.4 + math.exp(0.3) - 1.2) / 3, abs=1e-6)
    assert float(roll.detach()) == pytest.approx(float(out.loss.detach()), abs=1e-6)
    assert out.metrics["pg_clipfrac_lower"] == pytest.approx(1 / 3)
    out.loss.backward()
    roll.backward()
    torch.testing.assert_close(got.grad, want.grad)
    assert float(got.grad[0].abs().sum()) == 0 and float(got.grad[1].abs().sum()) > 0
    off = gspo_loss(old_logprob=old, logprob=logp, advantages=adv, response_mask=mask, loss_agg_mode=agg, clip_ratio=0.2)
    assert float(off.loss) == pytest.approx((math.exp(0.5) + math.exp(0.3) - 1.2) / 3, abs=1e-6)
    with pytest.raises(ValueError, match="dual_clip_c"):
        gspo_loss(old_logprob=old, logprob=logp, advantages=adv, response_mask=mask, dual_clip_c=1.0)


@pytest.mark.parametrize(("variant", "options", "loss", "clip"), [
    ("ppo", {}, {"loss_mode": "vanilla"}, (None, None)),
    ("vanilla", {}, {"loss_mode": "gpg"}, (None, None)),
    ("tis", {}, {"loss_mode": "cispo"}, (1.0, 0.0)),  # ROLL's [0, 1] weight bounds
    ("tis", {"tis_lower_bound": 0.5, "tis_upper_bound": 2.0}, {"loss_mode": "cispo"}, (0.5, 1.0)),
    ("cispo", {"cispo_epsilon_high": 0.3}, {"loss_mode": "cispo"}, (0.1, 0.3)),
    ("topr", {}, {"loss_mode": "topr_pg"}, (None, None)),
    ("topr", {"topr_negative_weight": 0.5}, {"loss_mode": "topr_pg", "loss_args": {"positive_coef": 1.0, "negative_coef": 0.5}}, (None, None)),
])
def test_roll_s_pg_worker_variants_are_posttrain_losses(variant, options, loss, clip):
    for worker in ("roll.pipeline.rlvr.actor_pg_worker.ActorPGWorker", "roll.pipeline.agentic.agentic_actor_pg_worker.ActorWorker"):
        native, report = translate({"actor_train": {"worker_cls": worker, "pg_variant": variant, "topr_positive_weight": 1.0, **options}}, "roll")
        assert not report.refused, [(e.key, e.reason) for e in report.refused]
        actor = native["actor"]
        assert actor["policy_loss"] == loss and (actor.get("clip_ratio_low"), actor.get("clip_ratio_high")) == clip
        assert report.entry("actor_train.worker_cls").status == "dropped"
        # an option of another variant is not read
        assert report.entry("actor_train.topr_positive_weight").status == ("translated" if variant == "topr" else "dropped")


def test_roll_s_pg_variants_without_a_counterpart_are_refused_and_other_workers_ignore_it():
    pg = "roll.pipeline.rlvr.actor_pg_worker.ActorPGWorker"
    for extra, key, words in (({"pg_variant": "kimi15"}, "actor_train.pg_variant", "Kimi k1.5"),
                              ({"pg_variant": "cispo", "cispo_use_unified_mask": True}, "actor_train.cispo_use_unified_mask", "unified token mask"),
                              ({"pg_variant": "tis", "tis_upper_bound": 0.9}, "actor_train.pg_variant", "0 <= tis_lower_bound < 1 <= tis_upper_bound")):
        _, report = translate({"actor_train": {"worker_cls": pg, **extra}}, "roll")
        assert words in report.entry(key).reason and report.entry(key).status == "refused"
    # ROLL's default worker reads no pg_variant: dropped; another worker class stays refused
    native, report = translate({"actor_train": {"pg_variant": "topr"}}, "roll")
    assert report.entry("actor_train.pg_variant").status == "dropped" and "policy_loss" not in native.get("actor", {})
    _, report = translate({"actor_train": {"worker_cls": "my.Worker", "pg_variant": "topr"}}, "roll")
    assert report.entry("actor_train.worker_cls").status == "refused"


def test_roll_v01_topr_terms_land_on_the_actor_and_follow_roll_s_formula():
    native, report = translate({"postive_loss_coef": 2.0, "use_topr_neg_loss_coef": 0.5, "rl_loss_coef": 0.0}, "roll")
    assert not report.refused
    assert native["actor"]["topr_positive_loss_coef"] == 2.0 and native["actor"]["topr_negative_loss_coef"] == 0.5
    # ROLL (2025-07 to v0.2.0): + postive_loss_coef agg_pos(-A log pi) + use_topr_neg_loss_coef agg_neg(-clip(ratio, 0, 1) A log pi)
    from posttrain.algorithms import topr_loss

    logp = torch.tensor([[math.log(0.5), math.log(0.5)], [math.log(0.25), math.log(0.5)]])
    old = torch.tensor([[math.log(0.5), math.log(0.25)], [math.log(0.5), math.log(0.5)]])
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    got = topr_loss(old_logprob=old, logprob=logp, advantages=adv, response_mask=torch.ones(2, 2), scores=torch.tensor([1.0, 0.0]),
                    positive_coef=2.0, negative_coef=0.5).loss
    # positive row: mean(ln 2, ln 2) = 0.693147, x 2; negative row: ratios clip to (0.5, 1):
    # mean(0.5 ln 0.25, ln 0.5) = -0.693147, x 0.5
    assert abs(float(got) - (2 * 0.693147 - 0.5 * 0.693147)) < 1e-5
    with pytest.raises(ConfigError, match="actor.topr_negative_loss_coef=0.5: these act on the RL loss"):
        load_config(None, ["algorithm.kind=sft", "actor.topr_negative_loss_coef=0.5"])


def test_a_placeholder_topr_coefficient_is_refused_as_roll_s_type_check_refuses_it():
    _, report = translate({"use_topr_neg_loss_coef": "x_2"}, "roll")
    entry = report.entry("use_topr_neg_loss_coef")
    assert entry.status == "refused" and "ROLL stops with a type error on it too" in entry.reason
    native, report = translate({"use_topr_neg_loss_coef": 0.5}, "roll")  # a number translates as before
    assert native["actor"]["topr_negative_loss_coef"] == 0.5 and not report.refused
