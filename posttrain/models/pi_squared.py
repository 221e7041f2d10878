"""The sum of squared next-token probabilities at each response token (verl's
``actor.calculate_sum_pi_squared``): the statistic of the variance-proxy metrics
(`posttrain.algorithms.variance_proxy_metrics`).

A forward of its own over the batch (verl computes it inside its old-log-prob pass): the decoder
states of `posttrain.models.logprobs`, the head applied chunk by chunk as for log-probs, so no more
than `MAX_CHUNK_ELEMENTS` logits exist at once.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posttrain.algorithms import sum_pi_squared_from_logits
from posttrain.models.logprobs import MAX_CHUNK_ELEMENTS, lm_head_logits, response_hidden_states


def response_sum_pi_squared(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 1.0,
    pack: bool = True,
    vision=None,
) -> Tensor:
    """sum_v softmax(logits / temperature)_v^2 at each real response token, (B, T) fp32; 0 on padding.
    `vision`: the rows' images, as in `posttrain.models.logprobs.response_hidden_states`."""
    hidden = response_hidden_states(model, prompt_ids, prompt_mask, response_ids, response_mask, pack=pack,
                                    vision=vision)  # (B, T, H)
    real = response_mask > 0  # (B, T)
    states = hidden[real]  # (N, H): the positions that predict real tokens
    step = max(1, MAX_CHUNK_ELEMENTS // model.get_output_embeddings().weight.shape[0])
    parts = [sum_pi_squared_from_logits(lm_head_logits(model, states[i : i + step]) / temperature)  # (n,)
             for i in range(0, states.shape[0], step)]
    values = torch.cat(parts) if parts else states.new_zeros(0, dtype=torch.float32)
    zeros = torch.zeros(response_ids.shape, dtype=torch.float32, device=response_ids.device)  # (B, T)
    return zeros.masked_scatter(real, values.float())
