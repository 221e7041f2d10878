"""Choosing the next token from last-position logits, and the log-prob recorded for it.

What is recorded matters more than what is sampled. PPO's ratio pi_new / pi_old starts from the
actor's recomputation `log_softmax(logits / temperature)` (posttrain.models), and the rollout
log-probs stand in for pi_old when no separate recomputation is done, so the engine records exactly
that quantity: the unmodified model's distribution at the sampling temperature.

Top-k and top-p truncation and the repetition penalty change which token is drawn but not what is
recorded (vLLM and verl report untruncated log-probs the same way). The sampler is then slightly
off-policy with respect to the recorded distribution: truncation drops tokens that would have
had small probability, and a repetition penalty > 1 makes repeated tokens rarer than their recorded
probability says. Keep both off (the defaults) when the rollout log-probs must be exact.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.rollout.base import SamplingParams


def apply_repetition_penalty(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """CTRL's penalty (Keskar et al. 2019, as HF applies it): divide positive logits, multiply
    negative ones, of every token already in the prompt or the response so far.

    >>> apply_repetition_penalty(torch.tensor([[2.0, -2.0, 1.0]]), torch.tensor([[True, True, False]]), 2.0)
    tensor([[ 1., -4.,  1.]])
    """
    if penalty == 1.0:
        return logits
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)  # (B, V)


def apply_top_k(logits: Tensor, k: int) -> Tensor:
    """Keep the k largest logits of each row (ties with the k-th are kept), -inf elsewhere."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_top_p(logits: Tensor, p: float) -> Tensor:
    """Nucleus sampling (Holtzman et al. 2019): keep the smallest set of most likely tokens whose
    probability reaches p, i.e. every token whose more-likely predecessors hold less than p.
    The most likely token is always kept."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(-1) - probs  # (B, V)
    drop_sorted = mass_before >= p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def next_tokens(
    logits: Tensor, params: SamplingParams, seen: Tensor | None, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """Pick one token per row from fp32 logits (B, V); return `(tokens (B,), logprobs (B,))`.

    `logprobs` are log softmax(logits / temperature) at the chosen tokens, before any penalty or
    truncation (see the module docstring). `seen` (B, V) marks tokens the repetition penalty hits.
    """
    scaled = logits / params.temperature if params.temperature != 1.0 else logits  # (B, V)
    # log_softmax by hand, keeping the unnormalised probabilities for the sampler: one exp pass
    # serves both (a 32k vocabulary makes every (B, V) pass count).
    shifted = scaled - scaled.amax(dim=-1, keepdim=True)  # (B, V)
    weights = shifted.exp()  # (B, V) probabilities up to each row's normaliser
    log_norm = weights.sum(dim=-1).log()  # (B,)
    shaping = seen is not None or params.top_k > 0 or params.top_p < 1.0
    if not params.do_sample:
        shaped = scaled if seen is None else apply_repetition_penalty(scaled, seen, params.repetition_penalty)
        tokens = shaped.argmax(dim=-1)  # (B,)
    elif not shaping:
        tokens = sample_categorical(weights, generator)  # (B,)
    else:
        shaped = scaled if seen is None else apply_repetition_penalty(scaled, seen, params.repetition_penalty)
        shaped = apply_top_p(apply_top_k(shaped, params.top_k), params.top_p)
        tokens = sample_categorical(torch.softmax(shaped, dim=-1), generator)  # (B,)
    return tokens, shifted.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - log_norm


def sample_categorical(weights: Tensor, generator: torch.Generator | None) -> Tensor:
    """One draw per row of non-negative `weights` (B, V), proportional to them, by inverting the
    cumulative distribution.

    Why not `torch.multinomial`: for one sample it draws V exponential variates per row (the
    "exponential race"), and on CPU those cost ~30 ns each, so with a 32k vocabulary sampling
    took longer than the LM head. Inversion needs one uniform per row and a cumulative sum. In
    fp32 each token's share of the running total is off by at most one rounding of that total
    (~6e-8 of it), and a zero weight is never drawn: its cumulative sum equals its predecessor's,
    so `searchsorted` lands before it.

    >>> sample_categorical(torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]), torch.Generator().manual_seed(0)).tolist()
    [1, 2]
    """
    cdf = weights.cumsum(-1)  # (B, V)
    total = cdf[:, -1:]  # (B, 1)
    u = torch.rand(weights.shape[0], 1, generator=generator, device=weights.device) * total  # (B, 1)
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # rounding must not reach the total
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=weights.shape[-1] - 1)  # (B,)
