"""Choosing the next token from last-position logits, and the log-prob recorded for it.

What is recorded matters more than what is sampled. PPO's ratio pi_new / pi_old starts from the
actor's recomputation `log_softmax(logits / temperature)` (posttrain.modeling), and the rollout
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
    scaled = logits / params.temperature  # (B, V)
    recorded = torch.log_softmax(scaled, dim=-1)  # (B, V)
    shaped = scaled
    if seen is not None:
        shaped = apply_repetition_penalty(shaped, seen, params.repetition_penalty)
    if not params.do_sample:
        tokens = shaped.argmax(dim=-1)  # (B,)
    else:
        shaped = apply_top_p(apply_top_k(shaped, params.top_k), params.top_p)
        probs = torch.softmax(shaped, dim=-1)  # (B, V)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
    return tokens, recorded.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
