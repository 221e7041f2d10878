"""ROLL's train_infer_correction: its is_weight and filters on posttrain's rollout_is / rollout_rs."""

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
    ({"is_weight": {"enabled": True, "upper_bound": None}}, "upper_bound null"),
    ({"is_weight": {"enabled": True, "detach": False}}, "detach false"),
    ({"filters": [{"enabled": True, "agg_type": "turn"}]}, "expected token, geometric, sequence or segment"),
    ({"filters": [{"enabled": True, "diff_enabled": True, "diff_low": 0.2, "diff_high": 0.1}]}, "low <= high"),
    ({"filters": [{"enabled": True, "ratio_low": 0.5, "ratio_high": 0.7},
                  {"enabled": True, "ratio_low": 0.8, "ratio_high": 1.2}]}, "disjoint bands"),
    ({"filters": [{"enabled": True, "ratio_low": 0.0}]}, "0 < low <= high"),
    ({"bogus": 1}, "TrainInferCorrectionConfig"),
])
def test_what_posttrain_has_no_counterpart_for_is_refused(block, reason):
    _, report = _alg(block)
    assert any(reason in e.reason for e in report.refused), [e.reason for e in report.refused]


def test_ratio_filters_are_k1_rejection_at_their_level_after_the_advantages():
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
    assert cfg.algorithm.rollout_reject_after_advantages is True  # ROLL's order, whatever reads the mask
    alg, report = _alg({"filters": filters[:1]}, whiten_advantages=True)
    assert not report.refused and alg["rollout_reject_after_advantages"] is True


def test_segment_and_diff_filters_are_the_segment_and_diff_options():
    """ROLL's example agent_val_frozen_lake-pg_var_is_correct.yaml filters at the segment level on
    both the ratio and the probability difference."""
    rule = {"enabled": True, "agg_type": "segment", "ratio_enabled": True, "diff_enabled": True,
            "ratio_low": 0.8, "ratio_high": 1.05, "diff_low": -0.1, "diff_high": 0.1}
    alg, report = _alg({"filters": [rule]}, whiten_advantages=True)
    assert not report.refused
    assert alg["rollout_rs"] == "seg_mean_k1,seg_mean_diff"
    assert alg["rollout_rs_threshold"] == f"{1 / 1.05!r}_{1 / 0.8!r},-0.1_0.1"
    alg, _ = _alg({"is_weight": {"enabled": True, "weight_type": "segment"}})
    assert alg["rollout_is_level"] == "segment" and "rollout_reject_after_advantages" not in alg


def _segment_means(values, mask):
    """Each run of mask ones replaced by its mean, one loop per row and run (ROLL's definition)."""
    out = torch.zeros_like(values)
    for b in range(mask.shape[0]):
        t = 0
        while t < mask.shape[1]:
            if mask[b, t] == 0:
                t += 1
                continue
            end = t
            while end < mask.shape[1] and mask[b, end] == 1:
                end += 1
            out[b, t:end] = values[b, t:end].mean()
            t = end
    return out


def _level(values, mask, level):
    values = values * mask
    n = mask.sum(-1, keepdim=True)
    return {"token": values, "sequence": values.sum(-1, keepdim=True).expand_as(mask),
            "geometric": (values.sum(-1, keepdim=True) / n).expand_as(mask), "segment": _segment_means(values, mask)}[level]


def _roll_correction(old, infer, mask, level, low, high, upper_bound, diff_band):
    """ROLL's compute_train_infer_correction from its definitions: the ratio at one level, the weight
    clamped to [0, upper_bound], and the filters keeping low <= ratio <= high and the probability
    difference at that level inside diff_band."""
    ratio = _level(old - infer, mask, level).exp()
    diff = _level(old.exp() - infer.exp(), mask, level)
    keep = (ratio >= low) & (ratio <= high) & (diff >= diff_band[0]) & (diff <= diff_band[1])
    return ratio.clamp(0.0, upper_bound) * mask, keep.float() * mask


@pytest.mark.parametrize("level", ["token", "sequence", "geometric", "segment"])
def test_the_translation_weights_and_keeps_what_roll_does(level):
    torch.manual_seed(0)
    old = -torch.rand(6, 5) * 2
    infer = old + torch.randn(6, 5) * 0.15
    mask = torch.ones(6, 5)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    mask[0, 2] = mask[3, 1] = mask[5, 3] = 0  # env tokens: rows of two or three turns
    width = 0.05 if level in ("token", "sequence") else 0.02  # the difference filter binds at every level
    band = (-width, width)
    block = {"is_weight": {"enabled": True, "weight_type": level, "upper_bound": 1.1},
             "filters": [{"enabled": True, "agg_type": level, "ratio_low": 0.85, "ratio_high": 1.1,
                          "diff_enabled": True, "diff_low": band[0], "diff_high": band[1]}]}
    alg, report = _alg(block)
    assert not report.refused
    weights = rollout_importance_weights(old, infer, mask, threshold=alg["rollout_is_threshold"], level=alg["rollout_is_level"], mode=alg["rollout_is_mode"]).weights
    keep, _ = rollout_rejection(old, infer, mask, options=alg["rollout_rs"], threshold=alg["rollout_rs_threshold"])
    want_w, want_keep = _roll_correction(old, infer, mask, level, 0.85, 1.1, 1.1, band)
    torch.testing.assert_close(weights, want_w)
    torch.testing.assert_close(keep, want_keep)
    assert 0 < float(keep.sum()) < float(mask.sum())  # the bounds bind on some tokens, not all
