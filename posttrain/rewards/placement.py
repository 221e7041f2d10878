"""Placing one score per sequence onto the response tokens."""

from __future__ import annotations

import torch


def place_scores(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Put each sequence's score on its last valid response token; zeros everywhere else.

    This is verl's convention: an outcome reward belongs to the token that ended the response, and
    returns/advantages carry it back to earlier tokens. "Last valid" is the last position where the
    mask is non-zero, so masks with holes (e.g. tool output inside a response) work too. A row with
    an empty response (mask all zero) gets an all-zero row: its score has no token to live on.

    >>> place_scores(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]]))
    tensor([[0., 1., 0.],
            [0., 0., 2.],
            [0., 0., 0.]])
    """
    if scores.dim() != 1 or response_mask.dim() != 2 or scores.shape[0] != response_mask.shape[0]:
        raise ValueError(
            f"expected scores (B,) and response_mask (B, T), got {tuple(scores.shape)} and {tuple(response_mask.shape)}"
        )
    _, length = response_mask.shape
    positions = torch.arange(1, length + 1, device=response_mask.device)  # (T,)
    last = ((response_mask != 0) * positions).max(dim=-1).values - 1  # (B,), -1 for an empty response
    token_level_scores = torch.zeros(response_mask.shape, dtype=scores.dtype, device=scores.device)  # (B, T)
    rows = torch.nonzero(last >= 0).squeeze(-1)  # (B',)
    token_level_scores[rows, last[rows]] = scores[rows]
    return token_level_scores
