"""Position ids and concatenated sequences for left-padded prompts followed by right-padded responses."""

from __future__ import annotations

import torch
from torch import Tensor


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions that count only real tokens, so left padding does not shift a prompt's positions.

    `cumsum(mask) - 1` gives 0 to the first real token of every row whatever its padding; padding
    before it would get -1, which rotary embeddings would happily use, so it is clipped to 0.

    >>> position_ids_from_mask(torch.tensor([[0., 0., 1., 1., 1.], [1., 1., 1., 1., 0.]])).tolist()
    [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, S)


def concat_prompt_response(
    prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Full sequences `(input_ids, attention_mask, position_ids)`, each (B, S) with S = P + T.

    The attention mask is returned as long because that is what every HF model accepts; the
    records keep float masks for arithmetic.
    """
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)  # (B, S)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1).long()  # (B, S)
    return input_ids, attention_mask, position_ids_from_mask(attention_mask)
