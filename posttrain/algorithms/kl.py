"""Per-token KL estimators between the policy and the reference model, and the KL-in-reward penalty.

Sampling from the policy, log pi(y_t) - log pi_ref(y_t) estimates KL(pi || pi_ref) token by token.
Schulman's note gives three estimators with different bias and variance; `full` computes the exact KL
over the vocabulary instead, which needs the whole distribution (logits), not one log-prob per token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from posttrain.algorithms.masked import masked_mean
from posttrain.errors import ConfigError

KL_PENALTY_KINDS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")


def _kl_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "full":
        if logprob.dim() < 3 or ref_logprob.shape != logprob.shape:
            raise ValueError(
                "kl kind 'full' needs full distributions: pass logits (or log-softmax) of shape (B, T, V) "
                f"for both models; got {tuple(logprob.shape)} and {tuple(ref_logprob.shape)}. With only "
                "per-token log-probs use 'kl', 'mse' or 'low_var_kl'."
            )
        logp = F.log_softmax(logprob.float(), dim=-1)
        ref_logp = F.log_softmax(ref_logprob.float(), dim=-1)
        return (logp.exp() * (logp - ref_logp)).sum(dim=-1)  # (B, T)
    diff = logprob.float() - ref_logprob.float()
    if kind in ("kl", "k1"):
        return diff
    if kind == "abs":
        return diff.abs()
    if kind in ("mse", "k2"):
        return 0.5 * diff.square()
    if kind in ("low_var_kl", "k3"):
        log_ratio = torch.clamp(-diff, min=-20.0, max=20.0)  # ref - policy; clamped before exp
        return torch.clamp(log_ratio.exp() - log_ratio - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"unknown kl kind {kind!r}; valid kinds: {', '.join(KL_PENALTY_KINDS)} (or k1+/k3+/low_var_kl+)")


def check_kl_kind(kind: str, key: str, *, per_token: bool = True) -> None:
    """Refuse a KL kind `kl_penalty` would reject, naming the config ``key``. ``per_token``: the
    caller has one log-prob per token (not logits), so ``full`` cannot be computed.

    >>> check_kl_kind("k3+", "actor.kl_loss_type")
    >>> check_kl_kind("k4", "algorithm.kl_penalty")
    Traceback (most recent call last):
    ...
    posttrain.errors.ConfigError: invalid configuration: algorithm.kl_penalty: unknown KL kind 'k4'; valid kinds: kl, k1, abs, mse, k2, low_var_kl, k3 (or k1+/k3+/low_var_kl+)
    """
    base = kind[:-1] if kind.endswith("+") else kind
    usable = [k for k in KL_PENALTY_KINDS if not (per_token and k == "full")]
    if base == "full" and per_token:
        raise ConfigError(
            f"{key}: KL kind 'full' needs the whole vocabulary distribution of both models, and posttrain keeps one "
            "log-prob per token; use low_var_kl (k3), kl (k1) or mse (k2)"
        )
    if base not in usable:
        raise ConfigError(f"{key}: unknown KL kind {kind!r}; valid kinds: {', '.join(usable)} (or k1+/k3+/low_var_kl+)")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref), shape (B, T); differentiable w.r.t. `logprob`.

    Formula:
        d = log pi - log pi_ref.  kl/k1: d.  abs: |d|.  mse/k2: d^2 / 2.
        low_var_kl/k3: exp(-d) + d - 1, with -d clamped to [-20, 20] and the result to [-10, 10].
        full: sum_v pi(v) (log pi(v) - log pi_ref(v)) from (B, T, V) logits.
        A trailing "+" (e.g. "k3+") keeps that value but takes the gradient of k2, which is unbiased
        for the gradient of KL.
    Names:
        verl `algorithm.kl_penalty` (reward) and `actor.kl_loss_type` (loss); ROLL `kl_penalty`;
        Trinity-RFT `kl_penalty_fn` / `kl_loss_fn` (k1, k2, k3, low_var_kl, abs).
    Paper:
        Schulman 2020, "Approximating KL Divergence" (blog post).
    """
    if kind.endswith("+") and kind[:-1] not in ("mse", "k2", "full"):
        value = _kl_forward(logprob, ref_logprob, kind[:-1])
        surrogate = _kl_forward(logprob, ref_logprob, "k2")
        return surrogate - surrogate.detach() + value.detach()
    return _kl_forward(logprob, ref_logprob, kind.rstrip("+"))


class KLRewardOutput(NamedTuple):
    """Rewards with the KL penalty subtracted, and the mean KL to feed a KL controller."""

    token_level_rewards: torch.Tensor  # (B, T)
    mean_kl: float  # per-sequence masked mean, averaged over sequences


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_logprob: torch.Tensor,
    ref_logprob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kind: str = "kl",
) -> KLRewardOutput:
    """Subtract a per-token KL penalty from the rewards (PPO-RLHF's "KL in reward").

    Formula:
        r_t = score_t - beta * KL_t * m_t, with KL_t = kl_penalty(old_logprob, ref_logprob, kind);
        mean_kl = mean_i (masked mean_t KL_it), the value an adaptive controller tracks.
    Names:
        verl `algorithm.use_kl_in_reward` + `algorithm.kl_penalty` + `algorithm.kl_ctrl.kl_coef`;
        ROLL `add_token_level_kl` + `kl_penalty` + `init_kl_coef`; Trinity-RFT `kl_penalty_fn`.
    Paper:
        Ziegler et al. 2019, Fine-Tuning Language Models from Human Preferences, arXiv:1909.08593.
    """
    mask = response_mask.float()
    kld = kl_penalty(old_logprob, ref_logprob, kind) * mask  # (B, T)
    rewards = token_level_scores.float() - kl_coef * kld
    mean_kl = float(masked_mean(kld, mask, dim=-1).mean()) if kld.shape[0] else 0.0
    return KLRewardOutput(rewards, mean_kl)
