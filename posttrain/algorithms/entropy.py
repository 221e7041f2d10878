"""Entropy of the policy's next-token distribution, from logits, in float32."""

from __future__ import annotations

import torch


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy H = logsumexp(z) - sum_v softmax(z)_v z_v, shape logits.shape[:-1].

    Formula:
        H(p) = -sum_v p_v log p_v, computed as logsumexp(z) - sum_v p_v z_v (stable for large logits).
    Names:
        verl `actor.entropy_coeff` (bonus); ROLL `entropy_loss_coef`; Trinity-RFT `entropy_loss_fn`.
    Paper:
        Williams & Peng 1991, Function Optimization Using Connectionist Reinforcement Learning
        Algorithms (entropy regularisation); Mnih et al. 2016, arXiv:1602.01783.
    """
    z = logits.float()
    p = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - (p * z).sum(dim=-1)


def entropy_from_logits_chunked(logits: torch.Tensor, chunk_size: int = 2048) -> torch.Tensor:
    """`entropy_from_logits` over at most `chunk_size` positions at a time.

    Formula:
        Same as entropy_from_logits; the float32 softmax of only one chunk (chunk_size x V) exists at
        once, which bounds peak memory for large vocabularies. Gradients still flow to `logits`.
    Names:
        verl `actor.entropy_from_logits_with_chunking`.
    Paper:
        (memory optimisation; no separate paper)
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    flat = logits.reshape(-1, logits.shape[-1])  # (N, V)
    parts = [entropy_from_logits(flat[i : i + chunk_size]) for i in range(0, flat.shape[0], chunk_size)]
    out = torch.cat(parts) if parts else flat.new_zeros(0, dtype=torch.float32)
    return out.reshape(logits.shape[:-1])


def sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position sum over the vocabulary of the squared probabilities, shape logits.shape[:-1].

    Formula:
        sum_v p_v^2 = exp(logsumexp(2 z) - 2 logsumexp(z)) for p = softmax(z): exact, and no (.., V)
        probability tensor is squared (stable for large logits). It is the collision probability of
        the next-token distribution: 1 for a certain token, 1 / V for a uniform one.
    Names:
        verl `actor.calculate_sum_pi_squared` (its input to the variance-proxy metrics,
        `posttrain.algorithms.variance_proxy_metrics`).
    Paper:
        (a statistic of the distribution; no separate paper)
    """
    z = logits.float()
    return torch.exp(torch.logsumexp(2.0 * z, dim=-1) - 2.0 * torch.logsumexp(z, dim=-1))
