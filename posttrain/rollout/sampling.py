"""Choosing the next token from last-position logits, and the log-prob recorded for it.

What is recorded matters more than what is sampled. PPO's ratio pi_new / pi_old starts from the
actor's recomputation `log_softmax(logits / temperature)` (posttrain.models), and the rollout
log-probs stand in for pi_old when no separate recomputation is done, so the engine records exactly
that quantity: the unmodified model's distribution at the sampling temperature.

Top-k, top-p and min-p truncation and the repetition penalty change which token is drawn but not what is
recorded (vLLM and verl report untruncated log-probs the same way). The sampler is then slightly
off-policy with respect to the recorded distribution: truncation drops tokens that would have
had small probability, and a repetition penalty > 1 makes repeated tokens rarer than their recorded
probability says. Keep both off (the defaults) when the rollout log-probs must be exact. The same
holds for the two draw-only settings: a minimum response length (the stop ids cannot be drawn
before it, vLLM's `min_tokens`) and FIRE sampling (Chen et al. 2024, "Flaming-hot Initiation with
Regular Execution Sampling for Large Language Models", arXiv:2410.21236: the first response token is
drawn at a very high temperature among the top-k tokens, the rest at the regular temperature, to
diversify the group's openings). The actor recomputes every token, the first included, at the
regular temperature, so the recorded log-prob is that one too.

Randomness is keyed, not drawn from a generator. Each response row has a key made from the rollout
seed, its prompt's uid and its sample index within the group (`row_keys`), and the uniform that
picks its token at decode step t is a hash of (key, t) (`keyed_uniforms`). So a response depends only
on its own key and the weights: not on which rows share its batch, how the batch is cut into decode
shards or across rollout workers, nor on what other rollouts (validation) ran before it. A run's
samples are therefore the same on 1 or N processes, and a resumed run needs no sampler state.
(verl, ROLL and Trinity-RFT draw from per-worker generators, so their samples change with the world
size.) The hash is murmur3's 32-bit finaliser (Appleby, MurmurHash3), evaluated on int64 tensors with
16-bit partial products so no intermediate overflows; it runs on any device and gives the same bits
on CPU and GPU.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

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


def apply_min_p(logits: Tensor, p: float) -> Tensor:
    """Min-p sampling (Nguyen et al. 2024, "Turning Up the Heat"): keep the tokens whose probability
    is at least p times the most likely token's, -inf elsewhere. Applied to temperature-scaled
    logits, as vLLM and SGLang do. p = 1 keeps only the most likely token(s).

    >>> apply_min_p(torch.log(torch.tensor([[0.5, 0.3, 0.2]])), 0.5).isinf().tolist()
    [[False, False, True]]
    """
    if p <= 0.0:
        return logits
    # log p_i >= log p + log p_max  <=>  logit_i >= log p + max logit (the normaliser cancels)
    floor = logits.amax(dim=-1, keepdim=True) + torch.log(torch.tensor(p, dtype=logits.dtype))  # (B, 1)
    return logits.masked_fill(logits < floor, float("-inf"))


_MASK32 = 0xFFFFFFFF
_GOLDEN32 = 0x9E3779B9  # 2**32 / golden ratio: spreads consecutive step counters over the key space


def row_keys(seed: int, uids: Sequence[str], samples: Sequence[int], device: torch.device | str = "cpu") -> Tensor:
    """(B, 2) int64 keys, each word < 2**32: one per response row, from (seed, prompt uid, sample index).

    >>> row_keys(1, ["a", "a"], [0, 1]).shape, bool((row_keys(1, ["a"], [0]) == row_keys(1, ["a"], [0])).all())
    (torch.Size([2, 2]), True)
    """
    words = []
    for uid, j in zip(uids, samples):
        digest = hashlib.blake2b(f"{seed}\x1f{uid}\x1f{j}".encode(), digest_size=8).digest()
        words.append((int.from_bytes(digest[:4], "little"), int.from_bytes(digest[4:], "little")))
    return torch.tensor(words, dtype=torch.long, device=device).reshape(-1, 2)


def request_seed(seed: int, uid: str, sample: int) -> int:
    """A 31-bit seed for one response, from (seed, prompt uid, sample index): what an engine that
    seeds whole requests (vLLM, SGLang) gets in place of `row_keys`, so its samples too depend on
    the response's own identity rather than on the batch it was decoded in.

    >>> request_seed(1, "a", 0) == request_seed(1, "a", 0) != request_seed(1, "a", 1)
    True
    """
    digest = hashlib.blake2b(f"{seed}\x1f{uid}\x1f{sample}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def _mul32(x: Tensor, m: int) -> Tensor:
    """(x * m) mod 2**32 for x < 2**32 held in int64: the product is formed from x's two 16-bit
    halves, so no partial product reaches 2**63 (signed overflow)."""
    low = (x & 0xFFFF) * m  # < 2**48
    high = (((x >> 16) * m) & 0xFFFF) << 16  # only the low 16 bits of this product survive mod 2**32
    return (low + high) & _MASK32


def _fmix32(h: Tensor) -> Tensor:
    """murmur3's finaliser: every input bit flips each output bit with probability ~1/2."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def keyed_uniforms(keys: Tensor, counter: int) -> Tensor:
    """(b,) float32 uniforms in [0, 1) for rows with `keys` (b, 2) at decode step `counter`.

    24 random bits each (all that fp32 holds below 1), so `u * total` in `sample_categorical`
    resolves a token's share down to 2**-24 of the total.
    """
    h = _fmix32((keys[:, 0] + counter * _GOLDEN32) & _MASK32)
    h = _fmix32(h ^ keys[:, 1])
    return (h >> 8).to(torch.float32) * (1.0 / (1 << 24))  # (b,)


def next_tokens(
    logits: Tensor, params: SamplingParams, seen: Tensor | None, uniforms: Tensor | None,
    *, step: int = 1, banned: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Pick one token per row from fp32 logits (B, V); return `(tokens (B,), logprobs (B,))`.

    `logprobs` are log softmax(logits / temperature) at the chosen tokens, before any penalty,
    truncation, ban or first-token setting (see the module docstring). `seen` (B, V) marks tokens
    the repetition penalty hits. `uniforms` (B,) in [0, 1) choose the sampled tokens
    (`keyed_uniforms`); greedy decoding needs none. `step` is the decode step (0: the first
    response token, which `params.first_token_*` draw: FIRE sampling); `banned` holds token ids
    that cannot be drawn at this step (the stop ids before `params.min_new_tokens`).
    """
    scaled = logits / params.temperature if params.temperature != 1.0 else logits  # (B, V)
    # log_softmax by hand, keeping the unnormalised probabilities for the sampler: one exp pass
    # serves both (a 32k vocabulary makes every (B, V) pass count).
    shifted = scaled - scaled.amax(dim=-1, keepdim=True)  # (B, V)
    weights = shifted.exp()  # (B, V) probabilities up to each row's normaliser
    log_norm = weights.sum(dim=-1).log()  # (B,)
    temperature, top_k = params.draw_settings(step)
    shaping = (seen is not None or banned is not None or top_k > 0 or params.top_p < 1.0 or params.min_p > 0.0
               or temperature != params.temperature)
    if not params.do_sample:
        tokens = _shaped(scaled, params, seen, banned).argmax(dim=-1)  # (B,): temperature cannot move an argmax
    elif not shaping:
        tokens = sample_categorical(weights, uniforms)  # (B,)
    else:
        drawn = scaled if temperature == params.temperature else logits / temperature  # (B, V)
        # vLLM's order: min-p on the scaled logits, then top-k, then top-p
        shaped = apply_top_p(apply_top_k(apply_min_p(_shaped(drawn, params, seen, banned), params.min_p), top_k), params.top_p)
        tokens = sample_categorical(torch.softmax(shaped, dim=-1), uniforms)  # (B,)
    return tokens, shifted.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - log_norm


def _shaped(logits: Tensor, params: SamplingParams, seen: Tensor | None, banned: Tensor | None) -> Tensor:
    """The repetition penalty, then the banned tokens at -inf (before top-k and top-p, as vLLM
    applies min_tokens: truncation then keeps the best tokens that may be drawn)."""
    if seen is not None:
        logits = apply_repetition_penalty(logits, seen, params.repetition_penalty)
    if banned is not None and banned.numel():
        logits = logits.index_fill(-1, banned, float("-inf"))  # (B, V)
    return logits


def sample_categorical(weights: Tensor, uniforms: Tensor) -> Tensor:
    """One draw per row of non-negative `weights` (B, V), proportional to them, by inverting the
    cumulative distribution at the row's uniform in [0, 1) (`uniforms`, (B,)).

    Why not `torch.multinomial`: for one sample it draws V exponential variates per row (the
    "exponential race"), and on CPU those cost ~30 ns each, so with a 32k vocabulary sampling
    took longer than the LM head. Inversion needs one uniform per row and a cumulative sum. In
    fp32 each token's share of the running total is off by at most one rounding of that total
    (~6e-8 of it), and a zero weight is never drawn: its cumulative sum equals its predecessor's,
    so `searchsorted` lands before it.

    >>> sample_categorical(torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]), torch.tensor([0.3, 0.7])).tolist()
    [1, 2]
    """
    cdf = weights.cumsum(-1)  # (B, V)
    total = cdf[:, -1:]  # (B, 1)
    u = uniforms.to(weights.device, weights.dtype).unsqueeze(-1) * total  # (B, 1)
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # rounding must not reach the total
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=weights.shape[-1] - 1)  # (B,)
