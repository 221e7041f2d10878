"""ROLL's policy-gradient workers (``actor_train.worker_cls`` + ``actor_train.pg_variant``) onto posttrain's losses.

ROLL's RLVR ``ActorPGWorker`` (roll/pipeline/rlvr/actor_pg_worker.py) and its agentic PG
``ActorWorker`` (roll/pipeline/agentic/agentic_actor_pg_worker.py) replace the default worker's
PPO loss by the one ``pg_variant`` names; everything around it (KL loss, entropy bonus, sample
weights, the train/inference correction, the aggregation of one loss over every token) is the
default worker's. Per variant, with its per-token loss l_t and the option keys ROLL reads from
``actor_train``:

- ``ppo``: the default worker's PPO clip (pg_clip, dual_clip_loss) -> ``vanilla``;
- ``vanilla``: l = -A log pi (no ratio) -> ``gpg``, whose loss is exactly that;
- ``tis``: l = -sg[clip(r, tis_lower_bound, tis_upper_bound)] A log pi (defaults 0 and 1) ->
  ``cispo`` with clip_ratio_low = 1 - lower, clip_ratio_high = upper - 1;
- ``cispo``: l = -sg[clip(r, 1 - cispo_epsilon_low, 1 + cispo_epsilon_high)] A log pi (0.1, 0.1)
  -> ``cispo``; its ``cispo_use_unified_mask`` (PPO's token mask) is refused;
- ``topr``: score-split TOPR in one aggregate (topr_positive_weight, topr_negative_weight) -> ``topr_pg``;
- ``kimi15``: refused (posttrain has no loss with Kimi k1.5's squared log-ratio penalty; its kimi15_tau
  is then unknown).

The default worker's ``importance_sampling: seq`` (its sequence-level ratio) is `importance_sampling`.

The old log-probs of the ratio: ROLL recomputes them with the training model before the update
where a step has several mini-batches or epochs, and otherwise takes each sample's first forward in
the update, which is the same numbers then (roll/configs/base_config.py set_old_logprobs_status,
roll/pipeline/base_worker.py get_old_log_probs_with_cache): posttrain always recomputes them.
``force_disable_old_logprobs_recompute: true`` makes ROLL take the first forward (or, in its agentic
pipeline, the engine's log-probs) even when the policy has moved since the step began: refused
(`old_logprobs`).

posttrain's losses clamp the log-ratio to [-20, 20] before exp; ROLL does not (only ratios beyond
e^20 differ).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.report import Entry
from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule
from posttrain.config.dialects.roll_defaults import PG_CLIP_DEFAULT

PG_WORKERS = ("roll.pipeline.rlvr.actor_pg_worker.ActorPGWorker", "roll.pipeline.agentic.agentic_actor_pg_worker.ActorWorker")
WORKER, VARIANT = "actor_train.worker_cls", "actor_train.pg_variant"
OPTIONS = {  # the variant's option keys under actor_train, with ROLL's defaults
    "tis": {"tis_lower_bound": 0.0, "tis_upper_bound": 1.0},
    "cispo": {"cispo_epsilon_low": 0.1, "cispo_epsilon_high": 0.1, "cispo_use_unified_mask": False},
    "topr": {"topr_positive_weight": 1.0, "topr_negative_weight": 1.0},
}
_LOSS = "actor.policy_loss.loss_mode"


def pg_worker(ctx: Context) -> None:
    option_keys = [f"actor_train.{name}" for names in OPTIONS.values() for name in names]
    if ctx.get(WORKER) not in PG_WORKERS:
        unread = [k for k in (VARIANT, *option_keys) if ctx.has(k)]
        ctx.consume(*unread)  # the worker_cls itself keeps the refusal of any other worker class
        for key in unread:
            ctx.drop(key, "read only by ROLL's policy-gradient workers (worker_cls ActorPGWorker or the agentic PG ActorWorker); "
                          "this file's worker computes ROLL's PPO loss")
        return
    ctx.consume(WORKER, VARIANT, *option_keys)
    ctx.drop(WORKER, "ROLL's policy-gradient worker: its loss is pg_variant's (translated there), the rest is the default worker's")
    variant = ctx.get(VARIANT, "vanilla")
    opts = {name: ctx.get(f"actor_train.{name}", default) for name, default in OPTIONS.get(variant, {}).items()}
    for key in option_keys:
        name = key.rpartition(".")[2]
        if not ctx.has(key):
            continue
        if name not in opts:
            ctx.drop(key, f"read only by pg_variant {name.split('_')[0]}, not this file's {variant!r}")
        elif variant != "cispo" or name != "cispo_use_unified_mask" or not opts[name]:  # a true unified mask is refused below
            ctx.report.add(Entry(key, "translated", _LOSS, opts[name], f"an option of pg_variant {variant}"))
    _variant(ctx, variant, opts)


def _variant(ctx: Context, variant: Any, opts: dict[str, Any]) -> None:
    if variant == "ppo":
        ctx.set(_LOSS, "vanilla", VARIANT, "ROLL's PPO clip, as its default worker's (pg_clip, dual_clip_loss)")
    elif variant == "vanilla":
        ctx.set(_LOSS, "gpg", VARIANT, "-A log pi on every token, without a ratio: gpg's loss")
    elif variant == "tis":
        low, high = opts["tis_lower_bound"], opts["tis_upper_bound"]
        if not (isinstance(low, (int, float)) and isinstance(high, (int, float)) and 0 <= low < 1 <= high):
            ctx.refuse(VARIANT, f"tis with bounds [{low}, {high}]: posttrain's clipped-weight loss (cispo) clips to [1 - a, 1 + b] with 0 < a <= 1 and b >= 0, so it needs 0 <= tis_lower_bound < 1 <= tis_upper_bound", _LOSS, variant)
            return
        _cispo(ctx, "tis", 1.0 - low, high - 1.0, f"sg[clip(ratio, {low}, {high})] x -A log pi")
    elif variant == "cispo":
        if opts["cispo_use_unified_mask"]:
            ctx.refuse("actor_train.cispo_use_unified_mask", "CISPO's unified token mask (PPO's clip mask on the weighted loss) is not an option of posttrain's cispo", _LOSS, True)
            return
        _cispo(ctx, "cispo", opts["cispo_epsilon_low"], opts["cispo_epsilon_high"], "MiniMax-M1's CISPO")
    elif variant == "topr":
        ctx.set(_LOSS, "topr_pg", VARIANT, "ROLL's PG-worker TOPR: responses with score <= 0 get the truncated ratio, one aggregate")
        args = {"positive_coef": opts["topr_positive_weight"], "negative_coef": opts["topr_negative_weight"]}
        if args != {"positive_coef": 1.0, "negative_coef": 1.0}:
            ctx.set("actor.policy_loss.loss_args", args, VARIANT, "topr_positive_weight, topr_negative_weight")
    elif variant == "kimi15":
        ctx.refuse(VARIANT, "Kimi k1.5's loss (REINFORCE with a squared log-ratio penalty, kimi15_tau) is not one of posttrain's policy losses; "
                            "choose another pg_variant or set actor.policy_loss.loss_mode", _LOSS, variant)
    else:
        ctx.refuse(VARIANT, f"unknown pg_variant {variant!r}; ROLL's are ppo, vanilla, tis, cispo, topr, kimi15", _LOSS, variant)


def _cispo(ctx: Context, variant: str, low: float, high: float, what: str) -> None:
    ctx.set(_LOSS, "cispo", VARIANT, f"{variant}: {what}, posttrain's cispo")
    ctx.set("actor.clip_ratio_low", low, VARIANT, f"{variant}'s lower weight bound 1 - {low}")
    ctx.set("actor.clip_ratio_high", high, VARIANT, f"{variant}'s upper weight bound 1 + {high}")


def importance_sampling(ctx: Context) -> None:
    """``importance_sampling: seq`` is ROLL's sequence-level PPO ratio, exp of the mean token log-ratio
    of each response, clipped as the token ratio is: posttrain's ``gspo`` loss, which has the same
    value and gradient whenever a response's tokens weigh alike in the aggregate (every
    loss_agg_mode; tests/config/test_roll_loss_keys.py), and apart from gspo's cap of the ratio at
    e^10. With ``dual_clip_loss: true`` ROLL's actor bounds that loss for a negative advantage at
    ``(1 + 2 x pg_clip) x |A|`` as for the token ratio: gspo's ``dual_clip_c`` option (loss_args).
    ``token`` is posttrain's own ratio."""
    key = "importance_sampling"
    if not ctx.has(key):
        return
    ctx.consume(key)
    value = ctx.get(key)
    if value in ("token", None):
        ctx.drop(key, "token: the per-token ratio, posttrain's own (actor.policy_loss.loss_mode vanilla)")
    elif value != "seq":
        ctx.refuse(key, f"expected token or seq, got {value!r}", None, value)
    else:
        ctx.set("actor.policy_loss.loss_mode", "gspo", key, "seq: ROLL's sequence ratio, exp(mean token log-ratio), is gspo's")
        clip = ctx.get("pg_clip", PG_CLIP_DEFAULT)
        # ROLL's actor bounds the sequence-ratio loss of a negative-advantage token as it bounds the
        # token ratio's; a bad pg_clip is refused by dual_clip_loss's own rule.
        if ctx.get("dual_clip_loss") is True and isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0:
            ctx.set("actor.policy_loss.loss_args", {"dual_clip_c": 1 + 2 * clip}, key, f"seq with dual_clip_loss: gspo's dual clip at ROLL's bound 1 + 2 x pg_clip ({clip})")


RANGE = "use_pg_clip_range"
_RANGE_KEYS = {"pg_clip_low": "actor.clip_ratio_low", "pg_clip_high": "actor.clip_ratio_high"}


def clip_range(ctx: Context) -> None:
    """``use_pg_clip_range: true`` makes ROLL's PPO clip ``clamp(ratio, 1 - pg_clip_low, 1 + pg_clip_high)``
    (its default worker, its agentic worker and the PG worker's ppo variant; each bound 0.2 unless
    given), posttrain's ``actor.clip_ratio_low`` / ``clip_ratio_high``; false clips with pg_clip on
    both sides. The dual clip's bound stays 1 + 2 x pg_clip (`roll_defaults`). A PG worker's other
    variants clip with bounds of their own and read none of the three."""
    present = [k for k in (RANGE, *_RANGE_KEYS) if ctx.has(k)]
    if not present:
        return
    ctx.consume(*present)
    variant = ctx.get(VARIANT, "vanilla")
    if ctx.get(WORKER) in PG_WORKERS and variant != "ppo":
        for key in present:
            ctx.drop(key, f"ROLL's pg_variant {variant} does not clip with PPO's range (only its ppo variant and the default worker read it)")
        return
    on = ctx.get(RANGE, False)
    if on not in (True, False, None):
        ctx.refuse(RANGE, f"expected true or false, got {on!r}", None, on)
        return
    if not on:
        for key in present:
            ctx.drop(key, "use_pg_clip_range false: ROLL clips with pg_clip on both sides (actor.clip_ratio)")
        return
    ctx.report.add(Entry(RANGE, "translated", "actor.clip_ratio_low", True, "ROLL clips to [1 - pg_clip_low, 1 + pg_clip_high]"))
    for name, native in _RANGE_KEYS.items():
        value = ctx.get(name, PG_CLIP_DEFAULT)
        key = name if ctx.has(name) else RANGE
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            ctx.refuse(key, f"expected a number, got {value!r}: ROLL clamps the ratio with it", native, value)
        else:
            ctx.set(native, float(value), key, f"{name} with use_pg_clip_range" + ("" if key == name else f" (unset: ROLL's default {PG_CLIP_DEFAULT})"))


FORCE = "force_disable_old_logprobs_recompute"


def old_logprobs(ctx: Context) -> None:
    if not ctx.has(FORCE):
        return
    ctx.consume(FORCE)
    value = ctx.get(FORCE)
    if value in (False, None):
        ctx.drop(FORCE, "false: ROLL recomputes the old log-probs where a step's later mini-batches or epochs need them, and takes "
                        "the same numbers from the first forward where not; posttrain recomputes them at the step's start")
    else:
        ctx.refuse(FORCE, f"{value!r}: ROLL then takes each sample's first forward in the update (its agentic pipeline the engine's "
                          "log-probs) as the old log-prob, even after earlier mini-batches moved the policy; posttrain's ratio is "
                          "always against the policy at the step's start (log-probs recomputed then)", None, value)


_PG = (("actor_train.worker_cls", PG_WORKERS[0]),)
RULES: dict[str, Rule] = {
    VARIANT: Rule(_LOSS, "with a PG worker_cls: ppo -> vanilla, vanilla -> gpg, tis and cispo -> cispo (with their bounds), "
                         "topr -> topr_pg; kimi15 refused; with another worker: dropped (not read)", "topr", _PG),
    **{f"actor_train.{name}": Rule(_LOSS, f"an option of pg_variant {variant} (translated with it)", default,
                                   (*_PG, (VARIANT, variant)))
       for variant, names in OPTIONS.items() for name, default in names.items()},
    FORCE: Rule(None, "false: dropped (posttrain recomputes the old log-probs at the step's start, as ROLL's automatic choice "
                      "amounts to); true: refused (ROLL then takes log-probs of a policy already updated by the step)", False),
    RANGE: Rule("actor.clip_ratio_low", "true: pg_clip_low and pg_clip_high (each 0.2 unless given) are actor.clip_ratio_low / "
                "clip_ratio_high; false: dropped with them (pg_clip on both sides)", True),
    **{name: Rule(native, f"with use_pg_clip_range true: {native}; else dropped (not read)", 0.28, ((RANGE, True),))
       for name, native in _RANGE_KEYS.items()},
}
HANDLERS = [pg_worker, clip_range, old_logprobs]
