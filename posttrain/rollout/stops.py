"""Stop strings for an engine that decodes token by token: does a row's text now end a stop string?

A stop string is text, and one string can span several tokens (or end inside one), so it is
checked on decoded text. Decoding a whole response at every step would cost O(T^2) per row; only
the last `window` tokens are decoded instead. A string that is newly complete after this step's
token ends inside that token, so it lies within the last `len(string)` characters, and those come
from at most `len(string)` tokens (every token decodes to at least one character, the special
tokens of a chat vocabulary included when they are not skipped), plus one token of slack for a
character split over two byte-level tokens.

`kept_length` / `drop_stop_strings` serve `include_stop_str_in_output: false`: a response that
stopped at a stop string gives its tokens back, from the token in which the string starts. Text
and tokens must agree, since the reward reads the text and the loss the tokens; so where the string
starts inside a token, that whole token goes, with the few characters before the string that it
held (vLLM trims only the text and keeps the tokens, so text and training disagree there).
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


def kept_length(tokens: Sequence[int], tokenizer: Any, stops: Sequence[str]) -> int:
    """How many leading tokens of a response hold no part of a stop string: all of them when its
    text has none (it ended at EOS or its length), else the longest prefix whose text ends at or
    before where the first stop string starts.

    A response stops at the first completed stop string, so the first occurrence is the one."""
    text = tokenizer.decode(list(tokens), skip_special_tokens=False)
    starts = [text.find(s) for s in stops if s in text]
    if not starts:
        return len(tokens)
    cut = min(starts)  # characters of the response before the stop string
    keep = len(tokens)
    while keep > 0 and len(tokenizer.decode(list(tokens[:keep]), skip_special_tokens=False)) > cut:
        keep -= 1  # usually one or two steps back: the string spans the last few tokens
    return keep


def drop_stop_strings(response_ids: Tensor, response_mask: Tensor, logprobs: Tensor, tokenizer: Any,
                      stops: Sequence[str], pad_token_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """The responses (B, T) with each stop string's tokens turned into padding: id `pad_token_id`,
    mask 0.0, log-prob 0.0, so the response mask ends before the string."""
    ids, mask, lps = response_ids.clone(), response_mask.clone(), logprobs.clone()  # (B, T) each
    lengths = mask.sum(1).long().tolist()
    for i, n in enumerate(lengths):
        keep = kept_length(ids[i, :n].tolist(), tokenizer, stops)
        if keep < n:
            ids[i, keep:n], mask[i, keep:n], lps[i, keep:n] = pad_token_id, 0.0, 0.0
    return ids, mask, lps
