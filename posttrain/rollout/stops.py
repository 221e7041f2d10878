"""Stop strings for an engine that decodes token by token: does a row's text now end a stop string?

A stop string is text, and one string can span several tokens (or end inside one), so it is
checked on decoded text. Decoding a whole response at every step would cost O(T^2) per row; only
the last `window` tokens are decoded instead. A string that is newly complete after this step's
token ends inside that token, so it lies within the last `len(string)` characters, and those come
from at most `len(string)` tokens (every token decodes to at least one character, the special
tokens of a chat vocabulary included when they are not skipped), plus one token of slack for a
character split over two byte-level tokens.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor


class StopStrings:
    """Which rows' responses just completed one of `stops` (decoded with `tokenizer`)."""

    def __init__(self, tokenizer: Any, stops: Sequence[str]):
        if tokenizer is None:
            raise ValueError("stop strings need the engine's tokenizer to decode responses; build the engine with tokenizer=")
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.window = max(len(s) for s in self.stops) + 1

    def hits(self, ids: Tensor, length: int) -> Tensor:
        """(b,) bool: rows of `ids` (b, >= length) whose first `length` tokens end with a newly
        completed stop string (it ends inside token `length - 1`)."""
        tail = ids[:, max(0, length - self.window) : length].tolist()
        found = []
        for row in tail:
            text = self.tokenizer.decode(row, skip_special_tokens=False)
            before = self.tokenizer.decode(row[:-1], skip_special_tokens=False)
            # a hit in `text` that was already in `before` ended at an earlier token: that row
            # would have stopped then, so only a string that appears with this token counts
            found.append(any(text.count(s) > before.count(s) for s in self.stops))
        return torch.tensor(found, dtype=torch.bool, device=ids.device)
