"""A per-token statistic of the policy's next-token distribution at each sampled response token:
sum_v pi(v)^2 (verl's ``actor.calculate_sum_pi_squared``, the variance-proxy metrics) or the
entropy-dynamics signal of ``algorithm.token_filter`` (posttrain.algorithms.TOKEN_FILTERS).

A forward of its own over the batch (verl computes sum_v pi^2 inside its old-log-prob pass): the
decoder states of `posttrain.models.logprobs`, the head applied chunk by chunk as for log-probs, so
no more than `MAX_CHUNK_ELEMENTS` logits exist at once.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from posttrain.models.logprobs import head_chunk_rows, lm_head_logits, response_hidden_states


def response_token_signal(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    signal: Callable[[Tensor, Tensor], Tensor],
    temperature: float = 1.0,
    pack: bool = True,
    vision=None,
) -> Tensor:
    """signal(logits / temperature, sampled tokens) at each real response token, (B, T) fp32; 0 on
    padding. `signal` maps (n, V) logits and their (n,) tokens to (n,) values."""
    hidden = response_hidden_states(model, prompt_ids, prompt_mask, response_ids, response_mask, pack=pack,
                                    vision=vision)  # (B, T, H)
    real = response_mask > 0  # (B, T)
    states, tokens = hidden[real], response_ids[real]  # (N, H), (N,): the positions that predict real tokens
    step = head_chunk_rows(model)
    parts = [signal(lm_head_logits(model, states[i : i + step]) / temperature, tokens[i : i + step])  # (n,)
             for i in range(0, states.shape[0], step)]
    values = torch.cat(parts) if parts else states.new_zeros(0, dtype=torch.float32)
    zeros = torch.zeros(response_ids.shape, dtype=torch.float32, device=response_ids.device)  # (B, T)
    return zeros.masked_scatter(real, values.float())
