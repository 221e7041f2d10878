"""ROLL's ``train_infer_correction``: weights and filters for the gap between the inference engine's
and the trainer's probabilities of the sampled tokens (ROLL's roll/utils/train_infer_corrections.py).

ROLL computes, from ``old_log_probs - infer_logprobs``, a ratio pi_old / pi_infer at four levels:
``token``, ``geometric`` (exp of the response's mean log-ratio), ``sequence`` (exp of its sum) and
``segment`` (exp of the mean log-ratio of each contiguous run of trained tokens: one turn of an
agentic trajectory).

- ``is_weight`` (enabled, weight_type, upper_bound, detach): the ratio at that level, clamped to
  [0, upper_bound], multiplies the per-token policy loss. That is posttrain's ``algorithm.rollout_is``
  with ``rollout_is_level`` = weight_type, ``rollout_is_threshold`` = upper_bound and
  ``rollout_is_mode: truncate`` (posttrain.algorithms.rollout_importance_weights).
- ``filters`` (each: enabled, agg_type, ratio_enabled/ratio_low/ratio_high, diff_*): a token (or its
  segment, or the whole response) leaves the loss unless ratio_low <= ratio <= ratio_high and, with
  diff_enabled, diff_low <= diff <= diff_high. The ratio filter is posttrain's ``algorithm.rollout_rs``
  k1 option of the level (token_k1, seq_sum_k1, seq_mean_k1, seg_mean_k1); its "L_U" bounds keep the
  ratio pi_old / pi_rollout in [1/U, 1/L], so U = 1/ratio_low and L = 1/ratio_high. The diff filter is
  the diff option of the level (token_diff, seq_sum_diff, seq_mean_diff, seg_mean_diff) with bounds
  "diff_low_diff_high". Filters are all applied (their bounds at one level intersect). ROLL applies
  them after computing the advantages (its agentic and RLVR pipelines), so the translation sets
  ``algorithm.rollout_reject_after_advantages``.

Refused, as posttrain has no counterpart: an ``upper_bound: null`` weight (posttrain's weights are
always truncated) and ``detach: false`` (posttrain's weights carry no gradient).
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

KEY = "train_infer_correction"
LEVELS = {"token": "token_k1", "sequence": "seq_sum_k1", "geometric": "seq_mean_k1", "segment": "seg_mean_k1"}
DIFF_LEVELS = {"token": "token_diff", "sequence": "seq_sum_diff", "geometric": "seq_mean_diff", "segment": "seg_mean_diff"}
# ROLL's TrainInferISWeightConfig and TrainInferFilterConfig defaults.
IS_DEFAULTS = {"enabled": False, "weight_type": "token", "upper_bound": 1.2, "detach": True}
FILTER_DEFAULTS = {"enabled": False, "agg_type": "token", "ratio_enabled": True, "ratio_low": 0.8, "ratio_high": 1.2,
                   "diff_enabled": False, "diff_low": -0.2, "diff_high": 0.2}


def _number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


def _is_weight(ctx: Context, block: Any) -> float | None:
    """Translate the is_weight block; return the weights' bound (for the metrics of a filter-only file)."""
    key = f"{KEY}.is_weight"
    if block is None:
        return None
    if not isinstance(block, Mapping):
        ctx.refuse(key, f"expected a mapping (enabled, weight_type, upper_bound, detach), got {block!r}", "algorithm.rollout_is", block)
        return None
    cfg = {**IS_DEFAULTS, **block}
    if cfg["enabled"] is not True:
        ctx.drop(key, "enabled false (ROLL's default): no importance weights")
        return None
    level, bound = cfg["weight_type"], cfg["upper_bound"]
    if level not in LEVELS:
        ctx.refuse(key, f"weight_type: expected token, geometric, sequence or segment, got {level!r}", "algorithm.rollout_is_level", level)
    elif bound is None:
        ctx.refuse(key, "upper_bound null (unclamped weights): posttrain truncates the weights at algorithm.rollout_is_threshold, which null switches off; give a bound", "algorithm.rollout_is_threshold", bound)
    elif not _positive(bound):
        ctx.refuse(key, f"upper_bound: expected a number > 0, got {bound!r}", "algorithm.rollout_is_threshold", bound)
    elif cfg["detach"] is not True:
        ctx.refuse(key, "detach false (gradient through the weights): posttrain's rollout importance weights are constants of the loss", "algorithm.rollout_is", cfg["detach"])
    else:
        why = f"{level} weights pi_old / pi_infer clamped at {bound}, multiplying the policy loss"
        ctx.set("algorithm.rollout_is", True, key, why)
        ctx.set("algorithm.rollout_is_level", level, key, why)
        ctx.set("algorithm.rollout_is_mode", "truncate", key, "ROLL clamps the weights to [0, upper_bound]")
        ctx.set("algorithm.rollout_is_threshold", bound, key, why)
        return bound
    return None


def _filters(ctx: Context, rules: Any) -> dict[str, tuple[float, float]]:
    """The enabled filters as {rollout_rs option: (lowest, highest ratio or difference kept)}, or {}
    after a refusal."""
    key = f"{KEY}.filters"
    if not isinstance(rules, list):
        ctx.refuse(key, f"expected a list of filter rules, got {rules!r}", "algorithm.rollout_rs", rules)
        return {}
    bounds: dict[str, tuple[float, float]] = {}
    for i, rule in enumerate(rules):
        where = f"{key}[{i}]"
        if not isinstance(rule, Mapping):
            ctx.refuse(where, f"expected a mapping (enabled, agg_type, ratio_*, diff_*), got {rule!r}", "algorithm.rollout_rs", rule)
            return {}
        cfg = {**FILTER_DEFAULTS, **rule}
        if cfg["enabled"] is not True:
            continue
        level, low, high = cfg["agg_type"], cfg["ratio_low"], cfg["ratio_high"]
        d_low, d_high = cfg["diff_low"], cfg["diff_high"]
        problem = None
        if level not in LEVELS:
            problem = f"agg_type: expected token, geometric, sequence or segment, got {level!r}"
        elif cfg["ratio_enabled"] is True and not (_positive(low) and _positive(high) and low <= high):
            problem = f"ratio_low {low!r} / ratio_high {high!r}: posttrain's ratio bounds are numbers with 0 < low <= high"
        elif cfg["diff_enabled"] is True and not (_number(d_low) and _number(d_high) and d_low <= d_high):
            problem = f"diff_low {d_low!r} / diff_high {d_high!r}: posttrain's probability-difference bounds are numbers with low <= high"
        if problem is not None:
            ctx.refuse(where, problem, "algorithm.rollout_rs", dict(rule))
            return {}
        for on, option, lo, hi in ((cfg["ratio_enabled"], LEVELS[level], low, high), (cfg["diff_enabled"], DIFF_LEVELS[level], d_low, d_high)):
            if on is True:  # several filters on one option keep the intersection of their bands
                old_low, old_high = bounds.get(option, (-float("inf"), float("inf")))
                bounds[option] = (max(old_low, lo), min(old_high, hi))
    for option, (lo, hi) in bounds.items():
        if lo > hi:
            ctx.refuse(key, f"the filters on {option} keep disjoint bands, so every token would be rejected; widen or drop one", "algorithm.rollout_rs", rules)
            return {}
    return bounds


def train_infer_correction(ctx: Context) -> None:
    if not ctx.has(KEY):
        return
    ctx.consume(KEY)
    block = ctx.get(KEY)
    if block is None:
        ctx.drop(KEY, "null: no correction (ROLL's default)")
        return
    if not isinstance(block, Mapping):
        ctx.refuse(KEY, f"expected a mapping with is_weight and filters, got {block!r}", None, block)
        return
    for extra in sorted(set(block) - {"is_weight", "filters"}):
        ctx.refuse(f"{KEY}.{extra}", "not a field of ROLL's TrainInferCorrectionConfig (is_weight, filters)", None, block[extra])
    bound = _is_weight(ctx, block.get("is_weight"))
    if block.get("filters") is None:
        return
    bounds = _filters(ctx, block["filters"])
    if not bounds:
        if isinstance(block["filters"], list) and not any(isinstance(r, Mapping) and r.get("enabled") is True for r in block["filters"]):
            ctx.drop(f"{KEY}.filters", "no filter enabled: nothing is rejected")
        return
    # posttrain's k1 bounds "L_U" keep pi_old / pi_rollout in [1/U, 1/L]; its diff bounds are ROLL's own.
    specs = [f"{low!r}_{high!r}" if option.endswith("diff") else f"{1 / high!r}_{1 / low!r}" for option, (low, high) in bounds.items()]
    kept = ", ".join(f"{option} keeps {'differences' if option.endswith('diff') else 'ratios'} in [{low}, {high}]" for option, (low, high) in bounds.items())
    ctx.set("algorithm.rollout_rs", ",".join(bounds), f"{KEY}.filters", kept)
    ctx.set("algorithm.rollout_rs_threshold", ",".join(specs), f"{KEY}.filters",
            "k1 bounds L_U on the ratio's inverse: U = 1/ratio_low, L = 1/ratio_high; diff bounds diff_low_diff_high")
    ctx.set("algorithm.rollout_reject_after_advantages", True, f"{KEY}.filters",
            "ROLL filters after computing the advantages, which count every trained token")
    if bound is None:
        ctx.set("algorithm.rollout_is_threshold", IS_DEFAULTS["upper_bound"], f"{KEY}.filters",
                "posttrain's rejection needs the correction on; without is_weight it only logs the weights (algorithm.rollout_is false)")


RULES: dict[str, Rule] = {
    KEY: Rule("algorithm.rollout_is, algorithm.rollout_rs", "is_weight: algorithm.rollout_is at its level, truncated at upper_bound; "
              "filters: algorithm.rollout_rs token_k1 / seq_sum_k1 / seq_mean_k1 / seg_mean_k1 (ratio) and the *_diff options "
              "(probability difference), applied after the advantages (algorithm.rollout_reject_after_advantages); "
              "refused: upper_bound null, detach false",
              {"is_weight": {"enabled": True, "weight_type": "geometric", "upper_bound": 2.0}}),
}
HANDLERS = [train_infer_correction]
