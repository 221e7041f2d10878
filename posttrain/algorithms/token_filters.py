"""Entropy-dynamics token filters Clip_B and Clip_V: which response tokens the losses count.

Wang et al. (arXiv:2602.03392) show that a policy-gradient step on token a changes the policy's
entropy at that position by an amount proportional to the step's advantage times a per-token signal
of the distribution p (before the step) and the sampled token's log-probability l = log p_a:

    S = p_a (H + l)                 (H = -sum_v p_v log p_v, the entropy)
    N = H sum_v p_v^2 + sum_v p_v^2 log p_v
    D = N - S

Negative-advantage tokens with an outlying signal drive entropy the most, so both filters drop some
of them from the losses' mask and keep every positive-advantage token. A filter's statistics are
taken over all masked tokens of the batch. `TOKEN_FILTERS` maps a filter's name
(`algorithm.token_filter.type`) to its per-token signal (computed from the actor's logits before the
update) and its keep rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from posttrain.algorithms.entropy import entropy_from_logits

_FLAT = 1e-12  # a signal whose spread is below this carries no outliers: every token is kept


def clip_b_signal(logprobs: Tensor, entropy: Tensor) -> Tensor:
    """S = p_a (H + log p_a), Clip_B's per-token signal, same shape as its inputs (float32)."""
    lp = logprobs.float()
    return lp.exp() * (entropy.float() + lp)


def clip_v_signal(logprobs: Tensor, entropy: Tensor, nec: Tensor) -> Tensor:
    """D = N - S, Clip_V's per-token signal, same shape as its inputs (float32)."""
    return nec.float() - clip_b_signal(logprobs, entropy)


def nec_from_logits(logits: Tensor) -> Tensor:
    """N = H sum_v p_v^2 + sum_v p_v^2 log p_v of p = softmax(logits), shape logits.shape[:-1] (float32)."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (.., V)
    p2 = logp.exp().square()  # (.., V)
    entropy = entropy_from_logits(logits)
    return entropy * p2.sum(-1) + (p2 * logp).sum(-1)


def _masked_spread(signal: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Masked mean and population std (denominator n, as the paper's code) of the signal, and m."""
    m = mask.float()
    n = m.sum().clamp_min(1.0)  # an empty batch keeps its (zero) mask and divides by 1
    mean = (signal * m).sum() / n
    std = (((signal - mean) ** 2 * m).sum() / n).sqrt()
    return mean, std, m


def _shares(keep: Tensor, advantages: Tensor, m: Tensor, mean: Tensor, std: Tensor) -> dict[str, float]:
    """Shares of all, positive- and negative-advantage masked tokens dropped, and the signal's spread."""
    kept = m * keep
    def dropped(part: Tensor) -> float:  # 0 where the batch has no such token (Trinity-RFT's code logs 1)
        total = float((m * part).sum())
        return 1.0 - float((kept * part).sum()) / total if total > 0 else 0.0
    ones = torch.ones_like(m)
    return {"token_filter/frac_clipped": dropped(ones), "token_filter/frac_clipped_pos": dropped((advantages > 0).float()),
            "token_filter/frac_clipped_neg": dropped((advantages < 0).float()),
            "token_filter/signal_mean": float(mean), "token_filter/signal_std": float(std)}


def clip_b_keep_mask(signal: Tensor, advantages: Tensor, mask: Tensor, *, mu: float = 2.5, **_: object) -> tuple[Tensor, dict[str, float]]:
    """Clip_B: (B, T) float keep mask dropping negative-advantage tokens whose signal S is far below the batch mean.

    Formula:
        S_t = p_t (H_t + log p_t) of the policy before the update (p_t the sampled token's probability,
        H_t the entropy); mean E and population std sigma of S over the masked tokens of the batch.
        keep_t = 1 if A_t >= 0, else [S_t - E >= -mu sigma]; every token is kept when sigma < 1e-12.
        The losses then count mask_t * keep_t.
    Names:
        Trinity-RFT `advantage_fn: clipb` (`advantage_fn_args.mu`, default 2.5; its `epsilon` is GRPO's,
        algorithm.adv_estimator_args.epsilon); posttrain `algorithm.token_filter.type: clip_b`.
    Paper:
        Wang et al. 2026, On the Entropy Dynamics in Reinforcement Fine-Tuning of Large Language
        Models, arXiv:2602.03392.
    Deviation:
        Trinity-RFT's code takes log p_t from the rollout engine; posttrain takes it from the actor's
        pass that also gives H_t (the paper's recomputed log-probabilities), so both come from one model.

    >>> keep, _ = clip_b_keep_mask(torch.tensor([[0., 0., 0., -3.]]), torch.tensor([[1., -1., -1., -1.]]), torch.ones(1, 4), mu=1.0)
    >>> keep.tolist()
    [[1.0, 1.0, 1.0, 0.0]]
    """
    mean, std, m = _masked_spread(signal.float(), mask)
    if float(std) < _FLAT:
        keep = torch.ones_like(m)
    else:
        low_outlier = signal.float() - mean < -mu * std  # lower side only: S far below the mean
        keep = (~((advantages < 0) & low_outlier)).float()  # positive and zero advantages are all kept
    return keep, _shares(keep, advantages, m, mean, std)


def clip_v_keep_mask(signal: Tensor, advantages: Tensor, mask: Tensor, *, mu: float = 8.5, max_frac: float = 1e-4,
                     **_: object) -> tuple[Tensor, dict[str, float]]:
    """Clip_V: (B, T) float keep mask dropping non-positive-advantage tokens whose signal D is far above
    the batch mean, with the number of negative-advantage tokens dropped capped.

    Formula:
        D_t = N_t - S_t with N_t = H_t sum_v p_v^2 + sum_v p_v^2 log p_v and S_t = p_t (H_t + log p_t), of
        the policy before the update; mean E and population std sigma of D over the masked tokens.
        keep_t = 1 if A_t > 0, else [D_t <= mu sigma] (as Trinity-RFT's code: the threshold is mu sigma,
        not E + mu sigma, and a zero-advantage token follows the rule for negative ones).
        Cap: when the dropped share of masked tokens exceeds max_frac and more than
        K = max(floor(max_frac n), 1) negative-advantage tokens would be dropped (n masked tokens),
        only the K of them with the largest D are dropped. Every token is kept when sigma < 1e-12.
    Names:
        Trinity-RFT `advantage_fn: clipv` (`advantage_fn_args.mu`, default 8.5, and `max_frac`,
        default 1e-4); posttrain `algorithm.token_filter.type: clip_v`.
    Paper:
        Wang et al. 2026, On the Entropy Dynamics in Reinforcement Fine-Tuning of Large Language
        Models, arXiv:2602.03392.

    >>> keep, _ = clip_v_keep_mask(torch.tensor([[0., 0., 0., 4.]]), torch.tensor([[-1., -1., 1., -1.]]), torch.ones(1, 4), mu=1.0, max_frac=1.0)
    >>> keep.tolist()
    [[1.0, 1.0, 1.0, 0.0]]
    """
    d = signal.float()
    mean, std, m = _masked_spread(d, mask)
    if float(std) < _FLAT:
        keep = torch.ones_like(m)
        return keep, _shares(keep, advantages, m, mean, std)
    real = m > 0
    keep_neg = d <= mu * std
    keep_bool = (advantages > 0) | keep_neg  # (B, T)
    n = m.sum().clamp_min(1.0)
    if float((real & ~keep_bool).float().sum() / n) > max_frac:
        cap = max(int(max_frac * float(n)), 1)
        neg_out = (advantages < 0) & real & ~keep_neg  # the negative-advantage tokens the rule drops
        if int(neg_out.sum()) > cap:
            # only the cap's worth of the most outlying negative-advantage tokens leave the mask
            worst = torch.topk(d.masked_fill(~neg_out, float("-inf")).flatten(), cap).indices
            limited = torch.zeros_like(neg_out).flatten()
            limited[worst] = True
            keep_bool = (keep_bool | neg_out) & ~limited.view_as(neg_out)
    keep = keep_bool.float()
    return keep, _shares(keep, advantages, m, mean, std)


@dataclass(frozen=True)
class TokenFilter:
    """A token filter's two parts: its per-token signal from the actor's (temperature-scaled) logits
    at the sampled tokens, and its keep rule over the batch's signal and advantages."""

    signal: Callable[[Tensor, Tensor], Tensor]  # (logits (n, V), tokens (n,)) -> (n,)
    keep: Callable[..., tuple[Tensor, dict[str, float]]]  # (signal, advantages, mask, *, mu, max_frac) -> (keep, metrics)
    default_mu: float  # mu when algorithm.token_filter.mu is null (Trinity-RFT's default_args)


def _token_logprobs(logits: Tensor, tokens: Tensor) -> Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (n,)


def _clip_b_from_logits(logits: Tensor, tokens: Tensor) -> Tensor:
    return clip_b_signal(_token_logprobs(logits, tokens), entropy_from_logits(logits))


def _clip_v_from_logits(logits: Tensor, tokens: Tensor) -> Tensor:
    return clip_v_signal(_token_logprobs(logits, tokens), entropy_from_logits(logits), nec_from_logits(logits))


TOKEN_FILTERS: dict[str, TokenFilter] = {
    "clip_b": TokenFilter(_clip_b_from_logits, clip_b_keep_mask, default_mu=2.5),
    "clip_v": TokenFilter(_clip_v_from_logits, clip_v_keep_mask, default_mu=8.5),
}
