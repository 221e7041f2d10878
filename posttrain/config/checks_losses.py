"""Cross-field rules of the losses and algorithms (one function per rule, each naming every key it
reads): the dual clip, validation sampling, the supervised and DPO losses, rollout correction and
PF-PPO. `posttrain.config.checks` runs them with the other rules."""

from __future__ import annotations

from typing import Any

from posttrain.algorithms.rollout_correction import rs_thresholds
from posttrain.config.access import get_path, is_rl, training_kind


def check_dual_clip(cfg: Any) -> list[str]:
    """Dual-clip PPO bounds the loss of negative-advantage tokens at clip_ratio_c × advantage; a
    bound of 1 or less would clip below the ordinary PPO objective (Ye et al. 2020, Dual-clip)."""
    c = get_path(cfg, "actor.clip_ratio_c", None)
    if c is not None and is_rl(cfg) and c <= 1:
        return [f"actor.clip_ratio_c ({c}) must be greater than 1 (dual-clip lower bound; verl uses 3.0)"]
    return []


def check_val_sampling(cfg: Any) -> list[str]:
    """Sampling at temperature 0 is undefined (division by zero); greedy is do_sample: false.
    Checked for training rollouts and for validation. SFT/DPO do not sample, so the rule is RL-only."""
    if not is_rl(cfg):
        return []
    problems = []
    for prefix, what in (("rollout.val_kwargs", "greedy validation"), ("rollout", "greedy rollouts")):
        do_sample = get_path(cfg, f"{prefix}.do_sample", None)
        temperature = get_path(cfg, f"{prefix}.temperature", None)
        if do_sample and temperature is not None and temperature <= 0:
            problems.append(
                f"{prefix}.temperature ({temperature}) must be > 0 when {prefix}.do_sample "
                f"is true; set do_sample: false for {what}"
            )
    return problems


def check_dpo_label_smoothing(cfg: Any) -> list[str]:
    """Label smoothing flips labels inside DPO's sigmoid loss (conservative DPO); the IPO and hinge
    losses have no such term, so a non-zero value would silently do nothing."""
    loss_type = get_path(cfg, "algorithm.dpo.loss_type", "sigmoid")
    smoothing = get_path(cfg, "algorithm.dpo.label_smoothing", 0.0)
    if training_kind(cfg) == "dpo" and loss_type != "sigmoid" and smoothing:
        return [
            f"algorithm.dpo.label_smoothing ({smoothing}) only applies to algorithm.dpo.loss_type sigmoid, "
            f"not {loss_type}; set it to 0 or use loss_type sigmoid"
        ]
    return []


def check_supervised_loss_agg(cfg: Any) -> list[str]:
    """SFT averages the loss over trained tokens and DPO over pairs; other aggregations of
    `actor.loss_agg_mode` are not implemented for them, so a changed value is refused, not ignored."""
    kind = training_kind(cfg)
    mode = get_path(cfg, "actor.loss_agg_mode", "token-mean")
    if kind in ("sft", "dpo", "distill") and mode != "token-mean":
        return [
            f"actor.loss_agg_mode={mode} is not implemented for algorithm.kind {kind} (it always averages "
            f"over {'pairs' if kind == 'dpo' else 'trained tokens'}); leave it at token-mean for this stage"
        ]
    return []


def check_gmpo_agg(cfg: Any) -> list[str]:
    """GMPO (`loss_mode: geo_mean`) averages its sequence-level loss over sequences: it reads no
    aggregation mode, so setting one would do nothing and is refused."""
    if not is_rl(cfg) or get_path(cfg, "actor.policy_loss.loss_mode", "vanilla") not in ("geo_mean", "gmpo"):
        return []
    if get_path(cfg, "actor.loss_agg_mode", "token-mean") != "token-mean":
        return ["actor.loss_agg_mode is not read by policy loss geo_mean (GMPO averages one loss per sequence); leave it at token-mean"]
    return []


def check_supervised_compile(cfg: Any) -> list[str]:
    """`actor.use_torch_compile` switches the RL stage's training forward; SFT/DPO stages compute
    their log-probs another way, so the flag would do nothing there and is refused."""
    kind = training_kind(cfg)
    if kind in ("sft", "dpo", "distill") and get_path(cfg, "actor.use_torch_compile", False):
        return [f"actor.use_torch_compile is not implemented for algorithm.kind {kind} (RL stages only); set it to false for this stage"]
    return []


def check_supervised_loss_coefs(cfg: Any) -> list[str]:
    """ROLL's rl_loss_coef and sft_loss_coef weigh parts of the RL actor loss, and verl's
    calculate_sum_pi_squared measures its policy gradient; SFT/DPO stages have no RL loss, so a
    changed value is refused there. The MoE router losses (moe_aux_loss_coef, moe_z_loss_coef) are added
    to the SFT and DPO losses too, not to distillation's."""
    kind = training_kind(cfg)
    keys = (("actor.rl_loss_coef", 1.0), ("actor.sft_loss_coef", 0.0), ("actor.calculate_sum_pi_squared", False),
            ("actor.topr_positive_loss_coef", 0.0), ("actor.topr_negative_loss_coef", 0.0))
    # SFT and DPO add the router losses to theirs (posttrain.trainer.sft.RouterLoss); distillation does not
    keys += (("actor.moe_aux_loss_coef", 0.0), ("actor.moe_z_loss_coef", 0.0)) if kind == "distill" else ()
    changed = [f"{k}={get_path(cfg, k, d)}" for k, d in keys if get_path(cfg, k, d) != d]
    if kind in ("sft", "dpo", "distill") and changed:
        return [f"{', '.join(changed)}: these act on the RL loss and algorithm.kind {kind} has no RL loss; leave them at their defaults for this stage"]
    return []


def check_rollout_correction(cfg: Any) -> list[str]:
    """Rollout importance sampling (verl's `algorithm.rollout_is*`) is on when
    `rollout_is_threshold` is set; its other keys only shape it, so setting them without a threshold,
    or a lower bound that truncate mode never reads, would do nothing and is refused; so is mode zero
    (it changes only the weights) without rollout_is, which leaves them out of the loss. Reusing the
    rollout's log-probs as the old ones unchecked (`always`) makes every weight exactly 1."""
    threshold = get_path(cfg, "algorithm.rollout_is_threshold", None)
    if not is_rl(cfg):
        return []
    shaping = {
        "algorithm.rollout_is": (get_path(cfg, "algorithm.rollout_is", False), False),
        "algorithm.rollout_is_threshold_lower": (get_path(cfg, "algorithm.rollout_is_threshold_lower", None), None),
        "algorithm.rollout_is_level": (get_path(cfg, "algorithm.rollout_is_level", "token"), "token"),
        "algorithm.rollout_is_mode": (get_path(cfg, "algorithm.rollout_is_mode", "truncate"), "truncate"),
        "algorithm.rollout_is_veto_threshold": (get_path(cfg, "algorithm.rollout_is_veto_threshold", None), None),
        "algorithm.rollout_is_batch_normalize": (get_path(cfg, "algorithm.rollout_is_batch_normalize", False), False),
        "algorithm.rollout_rs": (get_path(cfg, "algorithm.rollout_rs", None), None),
        "algorithm.rollout_rs_threshold": (get_path(cfg, "algorithm.rollout_rs_threshold", None), None),
        "algorithm.rollout_reject_after_advantages": (get_path(cfg, "algorithm.rollout_reject_after_advantages", False), False),
    }
    if threshold is None:
        changed = [f"{key}={value}" for key, (value, default) in shaping.items() if value != default]
        if changed:
            return [f"{', '.join(changed)} need(s) algorithm.rollout_is_threshold (null switches rollout importance sampling off); set a threshold, e.g. 2.0"]
        return []
    problems = []
    rs, rs_threshold = shaping["algorithm.rollout_rs"][0], shaping["algorithm.rollout_rs_threshold"][0]
    if rs is not None:
        try:
            rs_thresholds(rs, rs_threshold)
        except ValueError as err:
            problems.append(f"algorithm.rollout_rs={rs}, rollout_rs_threshold={rs_threshold}: {err}")
    elif rs_threshold is not None:
        problems.append("algorithm.rollout_rs_threshold is only read with algorithm.rollout_rs (the rejection options); set both or neither")
    lower = shaping["algorithm.rollout_is_threshold_lower"][0]
    mode = shaping["algorithm.rollout_is_mode"][0]
    rejects = rs is not None or mode == "mask" or shaping["algorithm.rollout_is_veto_threshold"][0] is not None
    if shaping["algorithm.rollout_reject_after_advantages"][0] and not rejects:
        problems.append("algorithm.rollout_reject_after_advantages=true moves the rejection after the advantages, but nothing rejects "
                        "tokens (no rollout_rs, rollout_is_mode truncate, no veto); remove it or set one of them")
    if lower is not None and mode == "truncate":
        problems.append(f"algorithm.rollout_is_threshold_lower ({lower}) is only read by algorithm.rollout_is_mode mask or zero (truncate caps the upper side only); remove it or use one of those")
    if mode == "zero" and not shaping["algorithm.rollout_is"][0]:
        problems.append("algorithm.rollout_is_mode=zero sets out-of-range weights to 0, but algorithm.rollout_is=false leaves the weights out of the loss; "
                        "set rollout_is: true (or use mask, which rejects the tokens)")
    if lower is not None and lower > threshold:
        problems.append(f"algorithm.rollout_is_threshold_lower ({lower}) must not exceed algorithm.rollout_is_threshold ({threshold})")
    if get_path(cfg, "actor.reuse_rollout_logprobs", "auto") == "always":
        problems.append(
            "algorithm.rollout_is_threshold needs old log-probs recomputed by the actor, but "
            "actor.reuse_rollout_logprobs=always takes the rollout's own, so every weight would be 1; use auto or never"
        )
    return problems


def check_pf_ppo(cfg: Any) -> list[str]:
    """PF-PPO's weighting (`algorithm.pf_ppo`) is read only when `algorithm.use_pf_ppo` is on, and
    its exponent only by the pow method; a changed value that nothing reads is refused."""
    if not is_rl(cfg):
        return []
    method = get_path(cfg, "algorithm.pf_ppo.reweight_method", "pow")
    weight_pow = get_path(cfg, "algorithm.pf_ppo.weight_pow", 2.0)
    changed = [f"algorithm.pf_ppo.{k}={v}" for k, v, d in (("reweight_method", method, "pow"), ("weight_pow", weight_pow, 2.0)) if v != d]
    if changed and not get_path(cfg, "algorithm.use_pf_ppo", False):
        return [f"{', '.join(changed)} need(s) algorithm.use_pf_ppo=true (PF-PPO is off, so nothing reads them); switch it on or remove them"]
    if method != "pow" and weight_pow != 2.0:
        return [f"algorithm.pf_ppo.weight_pow ({weight_pow}) is only read by reweight_method=pow, not {method}; remove it or use pow"]
    return []


def check_gdpo(cfg: Any) -> list[str]:
    """GDPO (`algorithm.adv_estimator=gdpo`) needs the reward's component keys, one weight per key
    when weights are given, and no rows whose components the reward function does not produce (the
    self-judge's); the keys and weights are read by no other estimator."""
    if not is_rl(cfg):
        return []
    keys = list(get_path(cfg, "algorithm.gdpo_reward_keys", []) or [])
    weights = get_path(cfg, "algorithm.gdpo_reward_weights", None)
    if get_path(cfg, "algorithm.adv_estimator", "gae") != "gdpo":
        changed = [k for k, v in (("gdpo_reward_keys", keys), ("gdpo_reward_weights", weights)) if v]
        return [f"algorithm.{', algorithm.'.join(changed)}: read only by algorithm.adv_estimator=gdpo, not "
                f"{get_path(cfg, 'algorithm.adv_estimator', 'gae')}; remove them or use gdpo"] if changed else []
    problems = []
    if not keys:
        problems.append("algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys: the keys of the reward function's returned dict "
                        "that are the reward's components (e.g. [accuracy_reward, format_reward])")
    if len(set(keys)) != len(keys):
        problems.append(f"algorithm.gdpo_reward_keys names a key twice: {keys}")
    if weights is not None and len(weights) != len(keys):
        problems.append(f"algorithm.gdpo_reward_weights has {len(weights)} weight(s) for {len(keys)} algorithm.gdpo_reward_keys; give one per key")
    if get_path(cfg, "reward.self_judge.enable", False):
        problems.append("algorithm.adv_estimator=gdpo with reward.self_judge.enable: the self-judge's rows have no reward components; "
                        "use another estimator or switch the self-judge off")
    if get_path(cfg, "algorithm.mix.expert_files", None):
        problems.append("algorithm.adv_estimator=gdpo with algorithm.mix.expert_files: the expert rows joined to each batch have no reward "
                        "components to normalise; use another estimator for a mix stage")
    for key, what in (("env.train_env_manager.tags", "environments"), ("rollout.agent.function", "agent function")):
        if get_path(cfg, key, None):
            problems.append(f"algorithm.adv_estimator=gdpo normalises the components a reward function returns; this stage's rewards come "
                            f"from its {what} ({key}), which return one number: use grpo")
    return problems
