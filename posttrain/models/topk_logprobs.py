"""The k most likely next tokens, and their log-probs, at every response position: what a teacher
hands the top-k distillation term (`actor.topk_kl`, posttrain.algorithms.distill_topk), with the
log-probs of the sampled tokens from the same forward (the reference's log-probs of the RL step).

The decoder body runs once (`response_hidden_states`, as for log-probs), and the LM head in chunks
of `head_chunk_rows` hidden states, so the (tokens, vocabulary) logits are never whole. The top-k
log-probs are of the full softmax(logits / temperature) (logsumexp in fp32), not renormalised over
the k: the term compares them with the student's log-probs of the same tokens. The sampled tokens'
log-probs are computed as `response_logprobs` computes them, to the bit.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from posttrain.errors import ConfigError
from posttrain.models.logprobs import head_chunk_rows, lm_head_logits, response_hidden_states
from posttrain.records import VisionInputs


def response_topk(
    model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor, *, k: int,
    temperature: float = 1.0, token_temperature: float = 1.0, pack: bool = True,
    vision: Sequence[VisionInputs | None] | None = None, chunk_tokens: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """`(token logprobs (B, T) fp32, top-k logprobs (B, T, K) fp32, top-k ids (B, T, K) long)`: at each
    real response token, the log-prob of the sampled token at `token_temperature`, and the k tokens
    the model finds most likely at that position (the distribution the token was drawn from), most
    likely first, with their log-probs at `temperature`; zeros on padding. Meant for `torch.inference_mode`."""
    vocab = model.get_output_embeddings().weight.shape[0]
    if not 0 < k <= vocab:
        raise ConfigError(f"actor.topk_kl.k={k}: the teacher's vocabulary has {vocab} tokens; k must be in 1..{vocab}")
    if temperature <= 0 or token_temperature <= 0:
        raise ValueError(f"temperatures must be > 0, got {temperature} and {token_temperature}")
    hidden = response_hidden_states(model, prompt_ids, prompt_mask, response_ids, response_mask, pack=pack, vision=vision)  # (B, T, H)
    real = response_mask > 0  # (B, T)
    flat, targets = hidden[real], response_ids[real]  # (N, H), (N,)
    step = head_chunk_rows(model, chunk_tokens)
    tokens, values, ids = [], [], []
    for start in range(0, flat.shape[0], step):
        logits = lm_head_logits(model, flat[start : start + step])  # (n, V) fp32
        scaled = logits / temperature
        top = scaled.topk(k, dim=-1)  # the order of the logits is the order of the log-probs
        values.append(top.values - torch.logsumexp(scaled, dim=-1, keepdim=True))  # (n, K)
        ids.append(top.indices)
        scaled = scaled if token_temperature == temperature else logits / token_temperature  # the ops of _chunk_logprobs
        tokens.append(scaled.gather(-1, targets[start : start + step].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1))
    shape = (*response_ids.shape, k)
    token_logprobs = torch.zeros(response_ids.shape, dtype=torch.float32, device=response_ids.device)  # (B, T)
    logprobs = torch.zeros(shape, dtype=torch.float32, device=response_ids.device)  # (B, T, K)
    token_ids = torch.zeros(shape, dtype=torch.long, device=response_ids.device)  # (B, T, K)
    if values:
        where = real.unsqueeze(-1).expand(shape)
        token_logprobs = token_logprobs.masked_scatter(real, torch.cat(tokens))
        logprobs = logprobs.masked_scatter(where, torch.cat(values))
        token_ids = token_ids.masked_scatter(where, torch.cat(ids))
    return token_logprobs, logprobs, token_ids
