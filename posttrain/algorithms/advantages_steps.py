"""Step-level credit for multi-turn (agentic) batches: GiGPO's anchor-state advantages, ROLL's
step_reinforce (discounted step returns) and step_reward (each step's own reward).

A multi-turn row holds several actions of one episode. Outcome estimators give every action the
episode's advantage; GiGPO adds a step-level term that compares actions taken in the *same
environment state* by different episodes of the group, so an action that led to a higher return
from that state is credited over one that led to a lower return, even inside a failed episode.

Inputs beside the usual ones (built by the trainer from the agent loop's per-turn records):

    turn_index   (B, T) long   the turn (0, 1, ...) each model token belongs to; -1 elsewhere
    turn_rewards (B, K) float  each turn's reward (the env's reward plus any format penalty)
    turn_states  (B, K) long   the anchor state of each turn: equal ids mean the same env state
                               within the same episode group; -1 past a row's last turn
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from posttrain.algorithms.agentic_norm import agentic_reward_norm
from posttrain.algorithms.groups import group_stats, group_sum
from posttrain.algorithms.registry import AdvantageOutput, EstimatorNeeds, register_advantage_estimator


def discounted_returns(turn_rewards: torch.Tensor, valid: torch.Tensor, gamma: float) -> torch.Tensor:
    """R_k = r_k + gamma * R_{k+1} over each row's valid turns (0 past its last turn).

    >>> discounted_returns(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[True, True, True]]), 0.5).tolist()
    [[0.25, 0.5, 1.0]]
    """
    rewards = torch.where(valid, turn_rewards.to(torch.float64), torch.zeros((), dtype=torch.float64))
    out = torch.zeros_like(rewards)  # (B, K)
    running = torch.zeros(rewards.shape[0], dtype=torch.float64)
    for k in reversed(range(rewards.shape[1])):
        running = rewards[:, k] + gamma * running
        out[:, k] = running
    return out * valid


def step_group_advantages(returns: torch.Tensor, states: torch.Tensor, norm_by_std: bool, epsilon: float) -> torch.Tensor:
    """(R - mean) / (std + epsilon) within each anchor-state group (or R - mean without the std);
    a state seen once has nothing to compare with and gets 0. Shape (B, K), 0 on padding."""
    valid = states >= 0
    out = torch.zeros_like(returns)
    if not bool(valid.any()):
        return out
    values, ids = returns[valid], states[valid]  # (N,) the valid turns, flattened
    _, dense = torch.unique(ids, return_inverse=True)
    n = int(dense.max()) + 1
    count = group_sum(torch.ones_like(values), dense, n)
    mean = group_sum(values, dense, n) / count
    var = group_sum((values - mean[dense]) ** 2, dense, n) / torch.clamp(count - 1, min=1)
    std = torch.where(count > 1, var.sqrt(), torch.ones_like(var))  # a state seen once: 0 / 1, never 0 / 0
    centred = values - mean[dense]  # exactly 0 for a state seen once
    out[valid] = centred / (std[dense] + epsilon) if norm_by_std else centred
    return out


@register_advantage_estimator("gigpo", needs=EstimatorNeeds(turns=True))
@torch.no_grad()
def gigpo_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: Any,
    turn_index: torch.Tensor | None = None,
    turn_rewards: torch.Tensor | None = None,
    turn_states: torch.Tensor | None = None,
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    step_gamma: float = 0.95,
    norm_adv_by_std: bool = True,
    epsilon: float = 1e-6,
    **_: Any,
) -> AdvantageOutput:
    """GiGPO: an episode-level group advantage plus a step-level advantage over anchor states.

    Formula:
        episode: s_i = sum_t r_{i,t}; A^E_i = (s_i - mean_g) / (std_g + epsilon) over the episode
        group g (GRPO's; a group of one has mean 0, std 1).
        step: R_{i,k} = sum_{k' >= k} step_gamma^(k'-k) r_{i,k'}, the discounted return from turn k
        of episode i (r = the turn's reward). The turns of a group whose environment was in the
        same state form a step group S; A^S_{i,k} = (R_{i,k} - mean_S) / (std_S + epsilon), and 0
        when the state was seen once.
        combined, on every token of turn k: A_{i,t} = episode_weight * A^E_i + step_weight * A^S_{i,k}.
        norm_adv_by_std=False drops both divisions (the paper's F_norm = 1, verl-agent's
        "mean_norm" mode).
    Names:
        ROLL `adv_estimator: gigpo` with `episode_reward_weight`, `step_reward_weight`,
        `step_reward_gamma`; verl-agent `gigpo` (`step_advantage_w`, `gamma`, `mode`).
    Paper:
        Feng, Xue, Liu, An 2025, Group-in-Group Policy Optimization for LLM Agent Training,
        arXiv:2505.10978 (Eq. 3 episode, Eq. 5 returns, Eq. 6 anchor groups, Eq. 7 step, Eq. 8 sum).
    Deviations:
        the episode score is the shaped score the trainer placed (after reward clip/normalisation
        and a KL penalty in the reward, if any), while the step returns use the raw turn rewards.
        States are grouped by exact identity only (no similarity threshold).
    Reads:
        token_level_rewards, response_mask, group_index, turn_index, turn_rewards, turn_states,
        step_weight (1.0), episode_weight (1.0), step_gamma (0.95), norm_adv_by_std (True),
        epsilon (1e-6). Needs an agentic batch (`EstimatorNeeds.turns`).
    """
    if turn_index is None or turn_rewards is None or turn_states is None:
        raise ValueError("gigpo needs per-turn records (turn_index, turn_rewards, turn_states): run it on an agentic stage")
    s = token_level_rewards.detach().to(torch.float64).sum(dim=-1)  # (B,)
    g = group_stats(s, group_index)
    episode = (s - g.mean) / (g.std + epsilon) if norm_adv_by_std else s - g.mean  # (B,)
    valid = turn_states >= 0  # (B, K)
    returns = discounted_returns(turn_rewards, valid, step_gamma)  # (B, K)
    step = step_group_advantages(returns, turn_states, norm_adv_by_std, epsilon)  # (B, K)
    # each token takes its turn's step advantage; tokens of no turn (padding, env text) take 0
    has_turn = turn_index >= 0
    per_token = torch.gather(step, 1, turn_index.clamp(min=0)) * has_turn  # (B, T)
    adv = (episode_weight * episode.unsqueeze(-1) + step_weight * per_token) * response_mask.to(torch.float64)
    adv = adv.to(torch.float32)
    return AdvantageOutput(adv, adv.clone())


@register_advantage_estimator("step_reinforce", needs=EstimatorNeeds(turns=True))
@torch.no_grad()
def step_reinforce_advantage(
    *,
    response_mask: torch.Tensor,
    group_index: Any,
    turn_index: torch.Tensor | None = None,
    turn_rewards: torch.Tensor | None = None,
    turn_states: torch.Tensor | None = None,
    step_gamma: float = 0.95,
    norm_adv_by_std: bool = True,
    epsilon: float = 1e-6,
    **_: Any,
) -> AdvantageOutput:
    """Step-wise REINFORCE: each turn is credited with its discounted return, normalised over all
    turns of its episode group.

    Formula:
        R_{i,k} = sum_{k' >= k} step_gamma^(k'-k) r_{i,k'} (as in gigpo); over the turns of every
        episode of group g: A_{i,k} = (R_{i,k} - mean_g) / (std_g + epsilon), or R_{i,k} - mean_g
        with norm_adv_by_std=False; a group with a single turn gets 0. Every token of turn k
        takes A_{i,k}.
    Names:
        ROLL `adv_estimator: step_reinforce` (discounted step returns, `step_reward_gamma`, then
        its reward normalisation grouped by trajectory group); not in verl or Trinity-RFT.
    Paper:
        Williams 1992, Simple statistical gradient-following algorithms for connectionist
        reinforcement learning (REINFORCE with a group-mean baseline); ROLL names no paper.
    Deviations:
        ROLL's mean_std normalisation gives 0 to a whole group whose std is below 1e-6; here such
        a group gets (R - mean) / (std + epsilon), which is 0 as well when every return is equal.
    Reads:
        response_mask, group_index, turn_index, turn_rewards, turn_states (for which turns exist),
        step_gamma (0.95), norm_adv_by_std (True), epsilon (1e-6).
    """
    if turn_index is None or turn_rewards is None or turn_states is None:
        raise ValueError("step_reinforce needs per-turn records (turn_index, turn_rewards, turn_states): run it on an agentic stage")
    valid = turn_states >= 0  # (B, K)
    returns = discounted_returns(turn_rewards, valid, step_gamma)  # (B, K)
    g = group_stats(torch.zeros(returns.shape[0]), group_index)
    groups = torch.where(valid, g.ids.unsqueeze(-1).expand_as(turn_states), torch.full_like(turn_states, -1))  # (B, K)
    step = step_group_advantages(returns, groups, norm_adv_by_std, epsilon)  # every turn of a group is one "state"
    has_turn = turn_index >= 0
    adv = torch.gather(step, 1, turn_index.clamp(min=0)) * has_turn * response_mask.to(torch.float64)  # (B, T)
    adv = adv.to(torch.float32)
    return AdvantageOutput(adv, adv.clone())


STEP_REWARD_MODES = ("reward", "return", "gigpo")  # what step_reward scores each turn by (its docstring)


@register_advantage_estimator("step_reward", needs=EstimatorNeeds(turns=True))
@torch.no_grad()
def step_reward_advantage(
    *,
    response_mask: torch.Tensor,
    turn_index: torch.Tensor | None = None,
    turn_rewards: torch.Tensor | None = None,
    turn_states: torch.Tensor | None = None,
    norm_groups: Sequence[Any] | None = None,
    norm_method: str = "identity",
    norm_mean_type: str | None = None,
    norm_std_type: str | None = None,
    reward_clip: float | None = None,
    mode: str = "reward",
    step_gamma: float = 0.95,
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    **_: Any,
) -> AdvantageOutput:
    """Each turn (step sample) scored on its own, normalised over the turns of its group: ROLL's
    agentic advantages when its step env managers make one sample per environment step.

    Formula:
        r_{i,k}: the reward of turn k of episode i (the environment's step reward). N(x; groups,
        method, mean type, std type) is agentic_reward_norm over all valid turns of the batch, one
        sample per turn: (x - mu) / (sigma + 1e-6) with sigma the unbiased std of the scope's turns,
        x - mu, or x; a std-divided scope of one turn or with |sigma| <= 1e-6 gets 0. The turn's score:
          mode "reward": n_{i,k} = N(r_{i,k}; norm_groups, norm_method, norm_mean_type, norm_std_type),
            `norm_groups` giving each turn its episode row's group (the environment group, the tag,
            or None for the whole batch);
          mode "return": the same N of R_{i,k} = sum_{k' >= k} step_gamma^(k'-k) r_{i,k'};
          mode "gigpo": n_{i,k} = episode_weight * N(s_i; as above) + step_weight * N(R_{i,k};
            anchor-state groups, norm_method), with s_i = sum_k r_{i,k} the episode's score counted
            once per turn, and the anchor groups the turns of one environment group taken in the
            same state (`turn_states`; their scope's mean and std, by norm_method alone).
        Then n is clipped to [-reward_clip, reward_clip] when set. Every token of turn k takes
        A_{i,k} = n_{i,k}; returns equal advantages.
    Names:
        ROLL `adv_estimator` with a step env manager (StepEnvManager, StepConcatEnvManager,
        AgentNativeStepEnvManager): `grpo` / `reinforce` are mode reward (each sample's own step
        reward), `step_reinforce` mode return (`step_reward_gamma`), `gigpo` mode gigpo
        (`episode_reward_weight`, `step_reward_weight`, `step_reward_gamma`): ROLL's response-level
        reward of a sample (compute_response_level_rewards) normalised by its `reward_normalization`
        over the step samples and clipped by `reward_clip`; with `gamma` 1 and no token-level KL its
        returns give each token that number (`algorithm.gamma` 1, no `use_kl_in_reward` /
        `whiten_rewards` / `reward_norm_mean` / `reward_norm_std`: the config check holds this
        estimator to that). Not in verl or Trinity-RFT.
    Paper:
        Williams 1992, REINFORCE, with the per-step reward or return; mode gigpo: Feng et al. 2025,
        Group-in-Group Policy Optimization for LLM Agent Training, arXiv:2505.10978, normalised as
        ROLL normalises it. ROLL names no paper for the others.
    Deviations:
        when a step's count of step samples is not a multiple of its batch sizes, ROLL first copies,
        deletes or draws samples (batch_adjust_mode) and its statistics count them so; here every
        turn counts once. Discounted returns are summed in float64 (ROLL: float32).
    Reads:
        response_mask, turn_index, turn_rewards, turn_states (which turns exist; mode gigpo: their
        anchor states), norm_groups (None), norm_method ("identity"), norm_mean_type (None),
        norm_std_type (None), reward_clip (None), mode ("reward"), step_gamma (0.95), step_weight
        (1.0), episode_weight (1.0).
    """
    if turn_index is None or turn_rewards is None or turn_states is None:
        raise ValueError("step_reward needs per-turn records (turn_index, turn_rewards, turn_states): run it on an agentic stage")
    if mode not in STEP_REWARD_MODES:
        raise ValueError(f"step_reward's mode must be one of {', '.join(STEP_REWARD_MODES)}, got {mode!r}")
    valid = turn_states >= 0  # (B, K)
    rows, turns = valid.nonzero(as_tuple=True)  # (N,) each step sample: its row and turn
    keys = None if norm_groups is None else [norm_groups[r] for r in rows.tolist()]

    def norm(values: torch.Tensor) -> torch.Tensor:  # (B, K) -> (N,), float32 statistics as ROLL's scores
        return agentic_reward_norm(values[rows, turns].to(torch.float32), keys, norm_method, norm_mean_type, norm_std_type)

    if mode == "reward":
        scores = norm(turn_rewards)
    elif mode == "return":
        scores = norm(discounted_returns(turn_rewards, valid, step_gamma))
    else:
        episode = torch.where(valid, turn_rewards, torch.zeros_like(turn_rewards)).sum(1, keepdim=True).expand_as(turn_rewards)  # (B, K)
        returns = discounted_returns(turn_rewards, valid, step_gamma)[rows, turns].to(torch.float32)  # (N,)
        # ROLL groups a trajectory group's step samples by state and normalises them by its method alone
        by_state = agentic_reward_norm(returns, turn_states[rows, turns].tolist(), norm_method, None, None)
        scores = episode_weight * norm(episode) + step_weight * by_state
    if reward_clip is not None:
        scores = scores.clamp(-reward_clip, reward_clip)
    per_turn = torch.zeros(turn_rewards.shape, dtype=torch.float32, device=turn_rewards.device)  # (B, K), 0 past a row's turns
    per_turn[rows, turns] = scores
    has_turn = turn_index >= 0
    adv = torch.gather(per_turn, 1, turn_index.clamp(min=0)) * has_turn * response_mask.to(torch.float32)  # (B, T)
    return AdvantageOutput(adv, adv.clone())
