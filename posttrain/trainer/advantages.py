"""From scores to advantages: the reward shaping and estimation part of the RL step.

Order (ROLL's, which verl's options are a subset of): response-level scores are clipped
(`reward_clip`) and normalised (`reward_norm_mean`/`reward_norm_std` by batch, group or running
statistics), placed on each response's last token, optionally whitened (`whiten_rewards`), reduced
by the KL penalty (`use_kl_in_reward`), turned into advantages by the registered estimator, then
optionally whitened (`whiten_advantages`) and clipped (`advantage_clip`). An estimator that needs a
greedy baseline (ReMax) reads `batch.reward_baselines`, raw scores that no shaping touches (verl).
With `use_pf_ppo`, the batch the critic and actor then train on is resampled by score (PF-PPO).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch

from posttrain.algorithms import (
    AdaptiveKLController,
    agentic_reward_norm,
    FixedKLController,
    RunningMoments,
    TOKEN_FILTERS,
    apply_kl_penalty,
    clip_advantages,
    clip_rewards,
    get_advantage_estimator,
    normalize_rewards,
    pf_ppo_resample,
    rollout_importance_weights,
    rollout_rejection,
    sample_keep_mask,
    whiten,
)
from posttrain.config.sections.algorithm import AgenticRewardNormConfig, AlgorithmConfig
from posttrain.records import RolloutBatch
from posttrain.rollout.trajectory import turn_tensors
from posttrain.rewards.placement import place_scores


@dataclass
class ShapingState:
    """State carried across steps: the KL controller and running reward statistics (checkpointed)."""

    kl_ctrl: FixedKLController | AdaptiveKLController | None = None
    running: RunningMoments = field(default_factory=RunningMoments)


def make_shaping_state(alg: AlgorithmConfig) -> ShapingState:
    ctrl = None
    if alg.use_kl_in_reward:
        k = alg.kl_ctrl
        ctrl = FixedKLController(k.kl_coef) if k.type == "fixed" else AdaptiveKLController(k.kl_coef, k.target_kl, k.horizon)
    return ShapingState(kl_ctrl=ctrl)


def shape_scores(scores: torch.Tensor, batch: RolloutBatch, alg: AlgorithmConfig, state: ShapingState) -> tuple[torch.Tensor, dict[str, float]]:
    """Response-level clipping and normalisation of scores (B,)."""
    metrics: dict[str, float] = {}
    if alg.reward_clip is not None:
        clipped = clip_rewards(scores, alg.reward_clip)
        scores, metrics["critic/reward_clip_frac"] = clipped.values, clipped.clip_frac
    if alg.reward_norm_mean is not None or alg.reward_norm_std is not None:
        scores = normalize_rewards(
            scores, alg.reward_norm_mean, alg.reward_norm_std, group_index=batch.group_index, running=state.running
        )
    return scores, metrics


def correct_rollout_mismatch(batch: RolloutBatch, alg: AlgorithmConfig) -> tuple[torch.Tensor | None, dict[str, float]]:
    """Rollout importance sampling (`algorithm.rollout_is*`, verl's semantics): sets the weights of
    the policy loss (`batch.rollout_is_weights`, when `rollout_is`); returns the tokens that mask
    mode, the veto and `rollout_rs` keep ((B, T), None when nothing rejects; `reject_tokens` applies
    them) and the metrics."""
    out = rollout_importance_weights(
        batch.old_logprobs, batch.rollout_logprobs, batch.train_mask, threshold=alg.rollout_is_threshold,  # agentic: model tokens only
        threshold_lower=alg.rollout_is_threshold_lower, level=alg.rollout_is_level, mode=alg.rollout_is_mode,
        veto_threshold=alg.rollout_is_veto_threshold, batch_normalize=alg.rollout_is_batch_normalize,
    )
    keep, metrics = out.keep, dict(out.metrics)
    if alg.rollout_rs is not None:  # rejection by divergence bounds, on top of the IS mode's own
        rs_keep, rs_metrics = rollout_rejection(
            batch.old_logprobs, batch.rollout_logprobs, batch.train_mask, options=alg.rollout_rs, threshold=alg.rollout_rs_threshold
        )
        keep, metrics = keep * rs_keep, {**metrics, **rs_metrics}
    if alg.rollout_is:
        batch.rollout_is_weights = out.weights
    rejects = alg.rollout_is_mode == "mask" or alg.rollout_is_veto_threshold is not None or alg.rollout_rs is not None
    return (keep if rejects else None), metrics


def reject_tokens(batch: RolloutBatch, keep: torch.Tensor) -> None:
    """Take the rejected tokens out of `batch.loss_mask`, which advantages computed afterwards and
    the losses count."""
    batch.loss_mask = keep * batch.train_mask  # keeps an agentic batch's env tokens out too


def compute_advantages(batch: RolloutBatch, scores: torch.Tensor, alg: AlgorithmConfig, state: ShapingState, n_steps: int,
                       teachers: dict[str, Any] | None = None) -> dict[str, float]:
    """Fill batch.token_level_scores/token_level_rewards/advantages/returns; return metrics.
    `teachers`: ref.teachers' teacher_logprobs, teacher_rows and teacher_coefs for on_policy_distill."""
    mask = batch.train_mask  # less the tokens rollout correction rejected (as verl's modified response_mask)
    shaped, metrics = shape_scores(scores, batch, alg, state)
    batch.token_level_scores = place_scores(shaped, batch.response_mask)  # (B, T): at the last real token
    rewards = batch.token_level_scores
    if alg.whiten_rewards:
        rewards = whiten(rewards, mask)
    if state.kl_ctrl is not None:
        out = apply_kl_penalty(rewards, batch.old_logprobs, batch.ref_logprobs, mask, state.kl_ctrl.value, alg.kl_penalty)
        rewards = out.token_level_rewards
        metrics["actor/reward_kl_penalty"] = out.mean_kl
        metrics["actor/reward_kl_penalty_coeff"] = state.kl_ctrl.value
        state.kl_ctrl.update(out.mean_kl, n_steps)
    batch.token_level_rewards = rewards
    estimator = get_advantage_estimator(alg.adv_estimator)
    turns = turn_tensors(batch.extra_info, mask.shape[1])  # an agentic batch's per-turn records, else None
    adv, ret = estimator(
        token_level_rewards=rewards,
        response_mask=mask,
        values=batch.values,
        ref_logprobs=batch.ref_logprobs,  # the teacher's when ref.model_path is set (on-policy distillation)
        old_logprobs=batch.old_logprobs,
        group_index=batch.group_index,
        gamma=alg.gamma,
        lam=alg.lam,
        norm_adv_by_std=alg.norm_adv_by_std_in_grpo,
        reward_baselines=batch.reward_baselines,
        sum_pi_squared=batch.sum_pi_squared,
        rollout_is_weights=batch.rollout_is_weights,
        reward_components=batch.reward_components,  # (B, K) with algorithm.adv_estimator gdpo, else None
        reward_weights=alg.gdpo_reward_weights,
        **alg.adv_estimator_args,  # the estimator's own options (checked at load); epsilon defaults per estimator
        turn_index=None if turns is None else turns.index,
        turn_rewards=None if turns is None else turns.rewards,
        turn_states=None if turns is None else turns.states,
        step_weight=alg.gigpo.step_weight,
        episode_weight=alg.gigpo.episode_weight,
        step_gamma=alg.gigpo.step_gamma,
        # step_reward normalises each turn's own reward with the agentic reward normalisation, then clips it
        norm_groups=norm_groups(batch, alg.agentic_reward_norm.grouping),
        norm_method=alg.agentic_reward_norm.method,
        norm_mean_type=alg.agentic_reward_norm.norm_mean_type,
        norm_std_type=alg.agentic_reward_norm.norm_std_type,
        reward_clip=alg.reward_clip,
        **(teachers or {}),
    )
    if batch.reward_baselines is not None:
        metrics["critic/reward_baseline/mean"] = float(batch.reward_baselines.mean())
    if batch.reward_components is not None:  # GDPO: each component's spread over the batch's responses
        for key, values in zip(alg.gdpo_reward_keys, batch.reward_components.unbind(-1)):
            metrics.update({f"gdpo/{key}/mean": float(values.mean()), f"gdpo/{key}/std": float(values.std(unbiased=False)),
                            f"gdpo/{key}/max": float(values.max()), f"gdpo/{key}/min": float(values.min())})
    if alg.whiten_advantages:
        adv = whiten(adv, mask)
    if alg.advantage_clip is not None:
        clipped = clip_advantages(adv, alg.advantage_clip)
        adv, metrics["critic/advantage_clip_frac"] = clipped.values * mask, clipped.clip_frac
    batch.advantages, batch.returns = adv, ret
    return metrics


def episode_advantages(batch: RolloutBatch, scores: torch.Tensor, alg: AlgorithmConfig, state: ShapingState, n_steps: int,
                       teachers: dict[str, Any] | None = None) -> dict[str, float]:
    """`compute_advantages` for an agent function's calls with env.train_rows turn: each episode
    counts once, as Trinity-RFT's multi_step_grpo (its step-wise GRPO) counts each run once.

    The rows of the episodes' last calls (every call of an episode holds its reward) are shaped and
    estimated alone, so clipping, normalisation and the group statistics see one score per episode;
    every call of the episode is then trained with that episode's advantage on each of its tokens
    (GRPO gives one number per row), divided by the episode's calls under the estimator's
    `enable_step_norm`. The config check keeps this to GRPO without per-token reward terms."""
    last: dict[str, int] = {}
    for i, info in enumerate(batch.extra_info):  # calls sit in call order: the last seen is the last call
        last[info["episode"]] = i
    order = {episode: k for k, episode in enumerate(last)}
    rows = list(last.values())
    episodes = batch[rows]
    metrics = compute_advantages(episodes, scores[rows], alg, state, n_steps, teachers)
    counted = episodes.train_mask.sum(-1)  # (E,)
    per_episode = (episodes.advantages * episodes.train_mask).sum(-1) / counted.clamp(min=1)  # (E,) GRPO: one value per row
    if alg.adv_estimator_args.get("enable_step_norm"):
        per_episode = per_episode / torch.tensor([float(batch.extra_info[i]["calls"]) for i in rows], device=per_episode.device)
    of_row = torch.tensor([order[info["episode"]] for info in batch.extra_info], device=per_episode.device)  # (B,)
    if alg.filter_groups.enable:  # Trinity-RFT's std_threshold: uniform groups leave the losses (no refill)
        kept = _spread_groups(scores[rows], [batch.group_index[i] for i in rows], alg.filter_groups.std_threshold)
        batch.loss_mask = batch.train_mask * kept[of_row, None].to(batch.train_mask.dtype)
        metrics["agent/skipped_groups"] = float(len({batch.group_index[i] for i, k in zip(rows, kept.tolist()) if not k}))
    batch.advantages = per_episode[of_row, None] * batch.train_mask  # (B, T)
    batch.returns = batch.advantages.clone()  # GRPO's returns are its advantages
    batch.token_level_scores = place_scores(episodes.token_level_scores.sum(-1)[of_row], batch.response_mask)
    batch.token_level_rewards = place_scores(episodes.token_level_rewards.sum(-1)[of_row], batch.response_mask)
    return metrics


def _spread_groups(scores: torch.Tensor, groups: list[Any], threshold: float | None) -> torch.Tensor:
    """(E,) bool: the episodes whose group of episodes keeps training. A group of one, or one whose
    scores' unbiased std is at most `threshold`, is skipped, as Trinity-RFT's step-wise GRPO skips it
    (with no threshold: a group whose scores are all equal)."""
    keep = torch.ones(len(groups), dtype=torch.bool)
    members: dict[Any, list[int]] = {}
    for e, g in enumerate(groups):
        members.setdefault(g, []).append(e)
    for ids in members.values():
        values = scores[ids].double()
        flat = len(ids) == 1 or (values.std() <= threshold if threshold is not None else bool((values == values[0]).all()))
        if flat:
            keep[ids] = False
    return keep


def agentic_scores(scores: torch.Tensor, batch: RolloutBatch, norm: AgenticRewardNormConfig) -> torch.Tensor:
    """An agentic stage's trajectory scores (B,) after ROLL's reward normalisation
    (`algorithm.agentic_reward_norm`), which comes before the shaping every stage shares. The groups:
    traj_group_id is the row's environment group (`group_index`), tags its environment type
    (`data_source`), batch all rows."""
    return agentic_reward_norm(scores, norm_groups(batch, norm.grouping), norm.method, norm.norm_mean_type, norm.norm_std_type)


def norm_groups(batch: RolloutBatch, grouping: str) -> list[Any] | None:
    """Each row's group under ROLL's reward-normalisation `grouping`: traj_group_id is the row's
    environment group (`group_index`), tags its environment type (`data_source`); batch: None (one
    group of all rows)."""
    return {"batch": None, "traj_group_id": batch.group_index, "tags": batch.data_source}[grouping]


def mask_samples(batch: RolloutBatch, scores: torch.Tensor, alg: AlgorithmConfig, max_length: int) -> dict[str, float]:
    """The sample filters (ROLL's `algorithm.max_len_mask`, `difficulty_mask`, `error_max_len_clip`;
    RAFT's `min_score_mask`, `valid_actions_mask`) from
    the raw scores (B,) and the response budget: the rows they reject leave `batch.loss_mask`, after
    the advantages (which, as in ROLL, see every row); returns the share each filter kept.

    Deviation: ROLL leaves the rows out of its policy and KL losses only; here the entropy bonus and
    the critic's value loss skip them too, so that every loss of a micro-batch has the normaliser the
    gradient accumulation weighs it by (posttrain.workers.microbatch)."""
    if not (alg.max_len_mask or alg.difficulty_mask or alg.error_max_len_clip or alg.min_score_mask is not None or alg.valid_actions_mask):
        return {}
    lengths = batch.response_mask.sum(-1)  # (B,)
    valid = None
    if alg.valid_actions_mask:  # an episode row counts its actions the environment did not read (posttrain.rollout.trajectory)
        if any("invalid_actions" not in (row or {}) for row in batch.extra_info):
            raise ValueError("algorithm.valid_actions_mask: a row has no actions of an environment (extra_info.invalid_actions); "
                             "it filters the episodes of an agentic stage (env.*): remove it from this stage")
        valid = torch.tensor([row["invalid_actions"] == 0 for row in batch.extra_info])  # (B,)
    keep, metrics = sample_keep_mask(
        scores, lengths, max_length, batch.group_index, max_len_mask=alg.max_len_mask,
        difficulty_mask=alg.difficulty_mask, low=alg.difficulty_low_threshold, high=alg.difficulty_high_threshold,
        error_max_len_clip=alg.error_max_len_clip, error_threshold=alg.error_max_len_threshold,
        min_score=alg.min_score_mask, valid=valid,
    )
    batch.loss_mask = batch.train_mask * keep.unsqueeze(-1)  # (B, T): with what rollout correction rejected
    return metrics


def filter_tokens(batch: RolloutBatch, signal: torch.Tensor | None, alg: AlgorithmConfig) -> dict[str, float]:
    """The entropy-dynamics token filter (`algorithm.token_filter`, Clip_B / Clip_V) on the actor's
    per-token signal (B, T) from before the update: the tokens it drops leave `batch.loss_mask`, after
    the advantages (which, as in Trinity-RFT, see every token); returns its metrics."""
    spec = alg.token_filter
    if spec.type is None or signal is None:
        return {}
    mask = batch.train_mask  # statistics over the tokens the losses would count
    mu = spec.mu if spec.mu is not None else TOKEN_FILTERS[spec.type].default_mu
    keep, metrics = TOKEN_FILTERS[spec.type].keep(signal, batch.advantages, mask, mu=mu, max_frac=spec.max_frac)  # (B, T)
    batch.loss_mask = mask * keep.to(mask.dtype)
    return metrics


def pf_ppo_key(seed: int, step: int) -> int:
    """Seed of one step's PF-PPO draw: a hash of (run seed, step), so the draw needs no generator
    state in checkpoints and does not move (or depend on) any other random stream."""
    digest = hashlib.blake2b(f"pf_ppo:{seed}:{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)  # manual_seed takes a non-negative int64


def filter_by_reward(batch: RolloutBatch, alg: AlgorithmConfig, seed: int, step: int) -> tuple[RolloutBatch, dict[str, float]]:
    """PF-PPO (`algorithm.use_pf_ppo`): the batch the critic and actor train on, and its metrics.

    B rows are drawn with replacement from the step's B responses, in proportion to a weight of each
    response's score (`algorithm.pf_ppo`, `posttrain.algorithms.pf_ppo_weights`), after advantages
    and returns were computed on the whole batch; every row-aligned field follows its row. The
    score is the sum of the row's token-level scores (after reward clipping and normalisation,
    before the KL penalty), as verl reads it. Off, the batch itself is returned.

    The draw is keyed by (`trainer.seed`, step) (`pf_ppo_key`), so a resumed run draws the rows an
    uninterrupted one would. Deviation: verl resamples only under its `gae` estimator; posttrain
    does under every estimator, as the key's documentation says.
    """
    if not alg.use_pf_ppo:
        return batch, {}
    scores = batch.token_level_scores.sum(-1).cpu()  # (B,)
    generator = torch.Generator().manual_seed(pf_ppo_key(seed, step))
    rows = pf_ppo_resample(scores, alg.pf_ppo.reweight_method, alg.pf_ppo.weight_pow, generator=generator)  # (B,)
    metrics = {
        "pf_ppo/unique_frac": len(set(rows.tolist())) / len(rows),  # share of distinct responses kept
        "pf_ppo/score_mean": float(scores[rows].mean()),  # mean score of the resampled batch
    }
    return batch[rows], metrics
