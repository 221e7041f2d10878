"""The k most likely next tokens, and their log-probs, at every response position: what a teacher
hands the top-k distillation term (`actor.topk_kl`, posttrain.algorithms.distill_topk).

The decoder body runs once (`response_hidden_states`, as for log-probs), and the LM head in chunks
of at most `MAX_CHUNK_ELEMENTS` logits, so the (tokens, vocabulary) logits are never whole. The
log-probs are of the full softmax(logits / temperature) (logsumexp in fp32), not renormalised over
the k: the term compares them with the student's log-probs of the same tokens.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from posttrain.errors import ConfigError
from posttrain.models.logprobs import MAX_CHUNK_ELEMENTS, lm_head_logits, response_hidden_states
from posttrain.records import VisionInputs


def response_topk(
    model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor, *, k: int,
    temperature: float = 1.0, pack: bool = True, vision: Sequence[VisionInputs | None] | None = None,
    chunk_tokens: int | None = None,
) -> tuple[Tensor, Tensor]:
    """`(logprobs (B, T, K) fp32, ids (B, T, K) long)`: at each real response token, the k tokens the
    model finds most likely at that position (the distribution the token was drawn from), most likely
    first; zeros on padding. Meant for `torch.inference_mode`."""
    vocab = model.get_output_embeddings().weight.shape[0]
    if not 0 < k <= vocab:
        raise ConfigError(f"actor.topk_kl.k={k}: the teacher's vocabulary has {vocab} tokens; k must be in 1..{vocab}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    hidden = response_hidden_states(model, prompt_ids, prompt_mask, response_ids, response_mask, pack=pack, vision=vision)  # (B, T, H)
    real = response_mask > 0  # (B, T)
    flat = hidden[real]  # (N, H)
    step = chunk_tokens or max(1, MAX_CHUNK_ELEMENTS // vocab)
    values, ids = [], []
    for start in range(0, flat.shape[0], step):
        scaled = lm_head_logits(model, flat[start : start + step]) / temperature  # (n, V) fp32
        top = scaled.topk(k, dim=-1)  # the order of the logits is the order of the log-probs
        values.append(top.values - torch.logsumexp(scaled, dim=-1, keepdim=True))  # (n, K)
        ids.append(top.indices)
    shape = (*response_ids.shape, k)
    logprobs = torch.zeros(shape, dtype=torch.float32, device=response_ids.device)  # (B, T, K)
    token_ids = torch.zeros(shape, dtype=torch.long, device=response_ids.device)  # (B, T, K)
    if values:
        where = real.unsqueeze(-1).expand(shape)
        logprobs = logprobs.masked_scatter(where, torch.cat(values))
        token_ids = token_ids.masked_scatter(where, torch.cat(ids))
    return logprobs, token_ids
