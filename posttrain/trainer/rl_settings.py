"""The RL stage's settings read from its config: sampling parameters, loss options and inputs, batch
budgets and the name checks. Pure functions of the config (no model is built here), shared by the
role builder (`rl_build`), the step (`rl`), the agentic and serving paths and preflight.
"""

from __future__ import annotations

import inspect
from typing import Any

from posttrain.algorithms import LOSS_AGG_MODES, check_kl_kind, estimator_options, get_advantage_estimator, get_policy_loss, policy_loss_options
from posttrain.config.checks import role_needs
from posttrain.config.schema import Config
from posttrain.errors import ConfigError
from posttrain.rollout.base import SamplingParams
from posttrain.workers.topk_kl import TopkKLSettings


def response_length(cfg: Config) -> int:
    return cfg.rollout.response_length or cfg.data.max_response_length


def policy_temperature(cfg: Config) -> float:
    """Temperature of training rollouts and of every log-prob computed for them (actor, reference).

    Greedy rollouts (`do_sample: false`) may leave it at 0: the argmax ignores it, and log-probs are
    then of the unscaled logits (1.0), as for greedy validation below."""
    r = cfg.rollout
    return r.temperature if r.do_sample or r.temperature > 0 else 1.0


def topk_kl_settings(section: Any) -> TopkKLSettings | None:
    """actor.topk_kl as the actor reads it; None when off (k 0)."""
    if not section.k:
        return None
    return TopkKLSettings(section.k, section.coef, section.policy_loss, section.teacher_temperature, section.log_prob_min_clamp,
                          section.loss_max_clamp)


# FIRE sampling's first-token settings, as verl's FIRE rollout sets them (a top_k of the config wins).
FIRE_TEMPERATURE, FIRE_TOP_K = 30.0, 16


def sampling_params(cfg: Config, tokenizer: Any) -> tuple[SamplingParams, SamplingParams]:
    """(training, validation) sampling parameters from `rollout` and `rollout.val_kwargs`; FIRE
    sampling (`rollout.use_fire_sampling`) draws the first token of training rollouts only."""
    r, v = cfg.rollout, cfg.rollout.val_kwargs
    length = response_length(cfg)
    stops = {"stop": tuple(r.stop_strings), "include_stop": r.include_stop_str_in_output}  # rollout.stop_strings, both phases
    fire = {"first_token_temperature": FIRE_TEMPERATURE, "first_token_top_k": r.top_k if r.top_k > 0 else FIRE_TOP_K} if r.use_fire_sampling else {}
    train = SamplingParams(
        temperature=policy_temperature(cfg), top_k=r.top_k, top_p=r.top_p, do_sample=r.do_sample, n=r.n,
        max_new_tokens=length, ignore_eos=r.ignore_eos, repetition_penalty=r.repetition_penalty,
        max_total_tokens=cfg.model.max_model_len, min_new_tokens=r.min_response_length, **stops, **fire,
    )
    # Greedy validation ignores the temperature for the choice of token; 1.0 keeps SamplingParams valid.
    val = SamplingParams(
        temperature=v.temperature if v.do_sample else 1.0, top_k=v.top_k, top_p=v.top_p, do_sample=v.do_sample,
        n=v.n, max_new_tokens=v.response_length or length, ignore_eos=r.ignore_eos,
        repetition_penalty=r.repetition_penalty if v.repetition_penalty is None else v.repetition_penalty,
        max_total_tokens=cfg.model.max_model_len, min_new_tokens=r.min_response_length, **stops,
    )
    return train, val


def baseline_sampling_params(cfg: Config, train: SamplingParams) -> SamplingParams | None:
    """Greedy decoding with the training limits, one response per prompt, when the advantage
    estimator asks for a greedy baseline (ReMax, as verl's `gen_baseline` step); else None."""
    return train.greedy() if role_needs(cfg).greedy_baseline else None


def _fielded_loss_options(cfg: Config) -> dict[str, Any]:
    """The loss options that have config fields of their own (clip ratios, clip-cov, kl-cov)."""
    a, pl = cfg.actor, cfg.actor.policy_loss
    return {
        "clip_ratio": a.clip_ratio,
        "clip_ratio_low": a.clip_ratio_low,
        "clip_ratio_high": a.clip_ratio_high,
        "clip_ratio_c": a.clip_ratio_c if a.dual_clip else None,
        "clip_cov_ratio": pl.clip_cov_ratio,
        "clip_cov_lb": pl.clip_cov_lb,
        "clip_cov_ub": pl.clip_cov_ub,
        "kl_cov_ratio": pl.kl_cov_ratio,
        "ppo_kl_coef": pl.ppo_kl_coef,
    }


def loss_options(cfg: Config) -> dict[str, Any]:
    """The configured options the selected policy loss accepts (only those: a loss refuses unknown
    ones), then `actor.policy_loss.loss_args` (checked by `check_rl_names`)."""
    accepted = policy_loss_options(cfg.actor.policy_loss.loss_mode)
    options = {k: v for k, v in _fielded_loss_options(cfg).items() if k in accepted}
    options.update(cfg.actor.policy_loss.loss_args)
    return options


# What the actor passes every policy loss, besides `loss_options` and the batch inputs a loss
# declares (`loss_inputs`).
_ACTOR_LOSS_ARGS = frozenset(
    {"old_logprob", "logprob", "advantages", "response_mask", "loss_agg_mode", "loss_scale_factor", "sample_weights"}
)
# Batch inputs the actor passes to a loss that declares them (ActorSettings.loss_inputs): the mix
# losses' expert rows, mix_chord's step, topr_roll's response scores.
_BATCH_LOSS_INPUTS = frozenset({"expert_mask", "global_step", "scores"})


def loss_inputs(cfg: Config) -> frozenset[str]:
    """The batch inputs (`_BATCH_LOSS_INPUTS`) the selected policy loss declares; `scores` only when
    it requires them (topr takes them optionally, and with them becomes ROLL's split: topr_roll)."""
    mode = cfg.actor.policy_loss.loss_mode
    declared = policy_loss_options(mode) & _BATCH_LOSS_INPUTS
    scores = inspect.signature(get_policy_loss(mode)).parameters.get("scores")
    if scores is not None and scores.default is not inspect.Parameter.empty:
        declared -= {"scores"}
    return declared


def mixes_expert_rows(cfg: Config) -> bool:
    """Whether expert SFT rows join each step's batch (`algorithm.mix`)."""
    return bool(cfg.algorithm.mix.expert_files) and cfg.algorithm.mix.expert_batch_size > 0


def _check_args(cfg: Config) -> None:
    """`algorithm.adv_estimator_args` and `actor.policy_loss.loss_args` name options their function declares."""
    est = cfg.algorithm.adv_estimator
    bad = sorted(set(cfg.algorithm.adv_estimator_args) - estimator_options(est))
    if bad:
        raise ConfigError(
            f"algorithm.adv_estimator_args: {', '.join(bad)} is not an option of estimator {est!r} "
            f"(its options: {', '.join(sorted(estimator_options(est))) or 'none'})"
        )
    mode = cfg.actor.policy_loss.loss_mode
    own = policy_loss_options(mode) - _BATCH_LOSS_INPUTS - {"loss_scale_factor", "sample_weights"} - set(_fielded_loss_options(cfg))
    for key in cfg.actor.policy_loss.loss_args:
        if key in _fielded_loss_options(cfg):
            raise ConfigError(f"actor.policy_loss.loss_args.{key}: this option has its own field; set actor.{key} (or actor.policy_loss.{key})")
        if key not in own:
            raise ConfigError(
                f"actor.policy_loss.loss_args.{key}: not an option of policy loss {mode!r} (its options: {', '.join(sorted(own)) or 'none'})"
            )
        value = cfg.actor.policy_loss.loss_args[key]
        if key.endswith("loss_agg_mode") and value is not None and value not in LOSS_AGG_MODES:  # mix's per-part modes
            raise ConfigError(f"actor.policy_loss.loss_args.{key}: {value!r} is not an aggregation mode; use one of {', '.join(LOSS_AGG_MODES)} (or null: actor.loss_agg_mode)")


def check_rl_names(cfg: Config) -> None:
    """Registry names are checked before any model is loaded: the estimator and its options, the
    policy loss, its options and inputs, and the KL kinds of the terms that are on."""
    get_advantage_estimator(cfg.algorithm.adv_estimator)
    if cfg.algorithm.use_kl_in_reward:
        check_kl_kind(cfg.algorithm.kl_penalty, "algorithm.kl_penalty")
    if cfg.actor.use_kl_loss:
        check_kl_kind(cfg.actor.kl_loss_type, "actor.kl_loss_type")
    _check_args(cfg)
    mode = cfg.actor.policy_loss.loss_mode
    params = inspect.signature(get_policy_loss(mode)).parameters
    if "expert_mask" in params and not mixes_expert_rows(cfg):
        raise ConfigError(
            f"actor.policy_loss.loss_mode={mode}: this loss trains expert rows beside the explored ones; set "
            "algorithm.mix.expert_files (SFT data) and algorithm.mix.expert_batch_size (rows per step)"
        )
    if mixes_expert_rows(cfg) and "expert_mask" not in params:
        raise ConfigError(
            f"algorithm.mix: expert rows are mixed in, but policy loss {mode!r} cannot tell them apart; "
            "use loss_mode mix or mix_chord, or leave algorithm.mix.expert_files empty"
        )
    # A registered loss may need inputs the actor does not have (dpo needs ref_logprob and pairs):
    # refuse it here rather than with a TypeError after the first rollout.
    given = _ACTOR_LOSS_ARGS | set(loss_options(cfg)) | _BATCH_LOSS_INPUTS
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in given]
    if "loss_scale_factor" not in params:
        missing.append("loss_scale_factor (as an option)")
    if missing:
        raise ConfigError(
            f"actor.policy_loss.loss_mode={mode}: not usable as the RL actor's loss (it needs "
            f"{', '.join(missing)}, which the actor does not pass); pick a policy-gradient loss such as "
            "vanilla, gspo or cispo, or train with its own algorithm.kind"
        )


def forward_batching(
    size: int, use_dynamic_bsz: bool | None, max_tokens: int | None, *, default_dynamic: bool, default_budget: int, sp: int = 1,
) -> tuple[int, int | None]:
    """(responses per forward, token budget of one micro-batch or None) of a no-grad pass (verl's
    log_prob_micro_batch_size_per_gpu / log_prob_use_dynamic_bsz / log_prob_max_token_len_per_gpu,
    the critic's forward_*): a null switch or budget falls back to the training pass's. The
    configured budget counts one device's tokens; a micro-batch is split over the role's `sp`
    Ulysses ranks, so it may hold `sp` times as many (`micro_batch_budget`).

    >>> forward_batching(4, None, None, default_dynamic=True, default_budget=100, sp=2)
    (4, 200)
    """
    dynamic = default_dynamic if use_dynamic_bsz is None else use_dynamic_bsz
    budget = default_budget if max_tokens is None else max_tokens
    return size, (micro_batch_budget(budget, sp) if dynamic else None)


def micro_batch_budget(per_device: int, sp: int) -> int:
    """Tokens one micro-batch may hold when each of its sequences is split over `sp` Ulysses ranks
    and each rank may hold `per_device` of them (verl multiplies its *_max_token_len_per_gpu by the
    role's ulysses_sequence_parallel_size the same way)."""
    return per_device * sp


def rollout_seed(cfg: Config) -> int:
    """Seed of the engine's sampler (and of each validation's reseed): rollout.seed, else trainer.seed."""
    return cfg.trainer.seed if cfg.rollout.seed is None else cfg.rollout.seed
