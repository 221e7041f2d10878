"""ROLL's train_infer_correction: its is_weight and ratio filters on posttrain's rollout_is / rollout_rs."""

import pytest
import torch

from posttrain.algorithms.rollout_correction import rollout_importance_weights, rollout_rejection
from posttrain.config import load_config
from posttrain.config.dialects import translate

KEY = "train_infer_correction"


def _alg(block, **more):
    native, report = translate({KEY: block, **more}, "roll")
    return native.get("algorithm", {}), report


def test_is_weight_is_truncated_rollout_importance_sampling_at_its_level():
    alg, report = _alg({"is_weight": {"enabled": True, "weight_type": "geometric", "upper_bound": 2.0}})
    assert not report.refused
    assert alg == {"rollout_is": True, "rollout_is_level": "geometric", "rollout_is_mode": "truncate", "rollout_is_threshold": 2.0}
    assert _alg({"is_weight": {"enabled": True}})[0]["rollout_is_threshold"] == 1.2  # ROLL's default bound
    alg, report = _alg({"is_weight": {"enabled": False, "weight_type": "sequence"}})
    assert alg == {} and not report.refused


@pytest.mark.parametrize(("block", "reason"), [
    ({"is_weight": {"enabled": True, "weight_type": "segment"}}, "per-turn level"),
    ({"is_weight": {"enabled": True, "upper_bound": None}}, "upper_bound null"),
    ({"is_weight": {"enabled": True, "detach": False}}, "detach false"),
    ({"filters": [{"enabled": True, "agg_type": "segment"}]}, "per-turn level"),
    ({"filters": [{"enabled": True, "diff_enabled": True}]}, "probability difference"),
    ({"filters": [{"enabled": True, "ratio_low": 0.0}]}, "0 < low <= high"),
    ({"bogus": 1}, "TrainInferCorrectionConfig"),
])
def test_what_posttrain_has_no_counterpart_for_is_refused(block, reason):
    _, report = _alg(block)
    assert any(reason in e.reason for e in report.refused), [e.reason for e in report.refused]


def test_ratio_filters_are_k1_rejection_at_their_level_and_need_the_mask_free_advantages():
    filters = [{"enabled": True, "agg_type": "geometric", "ratio_low": 0.8, "ratio_high": 1.05},
               {"enabled": True, "agg_type": "token", "ratio_low": 0.5, "ratio_high": 2.0},
               {"enabled": True, "agg_type": "geometric", "ratio_low": 0.9, "ratio_high": 1.25},  # intersects the first
               {"enabled": False, "agg_type": "segment"}]
    alg, report = _alg({"filters": filters})
    assert not report.refused
    assert alg["rollout_rs"] == "seq_mean_k1,token_k1" and alg["rollout_is_threshold"] == 1.2 and "rollout_is" not in alg
    assert alg["rollout_rs_threshold"] == f"{1 / 1.05!r}_{1 / 0.9!r},{1 / 2.0!r}_{1 / 0.5!r}"
    cfg = load_config(None, [f"algorithm.{k}={v}" for k, v in alg.items()])  # a valid posttrain config
    assert cfg.algorithm.rollout_rs == "seq_mean_k1,token_k1" and cfg.algorithm.rollout_is is False
    for other in ({"whiten_advantages": True}, {"adv_estimator": "gae"}, {"add_token_level_kl": True}):
        _, report = _alg({"filters": filters[:1]}, **other)
        assert "after computing the advantages" in report.entry(f"{KEY}.filters").reason


def _roll_correction(old, infer, mask, level, low, high, upper_bound):
    """ROLL's compute_train_infer_correction from its definitions: the ratio at one level, the weight
    clamped to [0, upper_bound], and the filter keeping low <= ratio <= high."""
    log_ratio = (old - infer) * mask
    n = mask.sum(-1, keepdim=True)
    per_level = {"token": log_ratio, "sequence": log_ratio.sum(-1, keepdim=True).expand_as(mask),
                 "geometric": (log_ratio.sum(-1, keepdim=True) / n).expand_as(mask)}
    ratio = per_level[level].exp()
    return ratio.clamp(0.0, upper_bound) * mask, ((ratio >= low) & (ratio <= high)).float() * mask


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_the_translation_weights_and_keeps_what_roll_does(level):
    torch.manual_seed(0)
    old = -torch.rand(6, 5) * 2
    infer = old + torch.randn(6, 5) * 0.15
    mask = torch.ones(6, 5)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    block = {"is_weight": {"enabled": True, "weight_type": level, "upper_bound": 1.1},
             "filters": [{"enabled": True, "agg_type": level, "ratio_low": 0.85, "ratio_high": 1.1}]}
    alg, report = _alg(block)
    assert not report.refused
    weights = rollout_importance_weights(old, infer, mask, threshold=alg["rollout_is_threshold"], level=alg["rollout_is_level"], mode=alg["rollout_is_mode"]).weights
    keep, _ = rollout_rejection(old, infer, mask, options=alg["rollout_rs"], threshold=alg["rollout_rs_threshold"])
    want_w, want_keep = _roll_correction(old, infer, mask, level, 0.85, 1.1, 1.1)
    torch.testing.assert_close(weights, want_w)
    torch.testing.assert_close(keep, want_keep)
    assert 0 < float(keep.sum()) < float(mask.sum())  # the bounds bind on some tokens, not all
