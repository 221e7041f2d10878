"""The hf engine's two building blocks below its decode loop: how many threads decode a batch on
CPU (`auto_decode_workers`), and the HF decoder body behind `LeanDecoder`'s interface (`HFDecoder`).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn
from transformers import StaticCache

from posttrain.models.vision import image_token_mask, media_embeddings, mrope_positions, stack_vision, video_token_mask
from posttrain.records import VisionInputs


# Rows per decode thread below which `auto_decode_workers` adds no thread: measured on 2 cores,
# two shards of 8 rows still decoded 1.34x faster than one batch of 16 (docs/performance.md).
MIN_ROWS_PER_WORKER = 8


def auto_decode_workers(device: torch.device, rows: int) -> int:
    """Decode threads for `rows` rows when not configured: on CPU one per torch thread, with at
    least `MIN_ROWS_PER_WORKER` rows each; 1 elsewhere (a GPU runs one batch's kernels best)."""
    if device.type != "cpu":
        return 1
    return max(1, min(torch.get_num_threads(), rows // MIN_ROWS_PER_WORKER))


class HFDecoder:
    """The HF path behind `LeanDecoder`'s interface: the model's decoder body over a `StaticCache`,
    with an attention mask of the cache's final length (slots not yet written are masked out)."""

    def __init__(self, model: nn.Module, max_len: int):
        self.body = model.get_decoder()
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self.max_len = max_len
        self.mask: Tensor | None = None  # (b, max_len) long
        self.length = 0

    def prefill(self, ids: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
        """Left-padded prompts ids (b, P), mask (b, P), positions (b, P) -> last hidden states (b, H)."""
        b, P = ids.shape
        self.mask = torch.zeros(b, self.max_len, dtype=torch.long, device=ids.device)
        self.mask[:, :P] = mask
        self.length = P
        return self._forward(ids, positions)

    def step(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """One new real token per row, tokens (b,) at positions (b,) -> hidden states (b, H)."""
        self.mask[:, self.length] = 1
        self.length += 1
        return self._forward(tokens.unsqueeze(1), positions.unsqueeze(1))

    def reorder(self, index: Tensor) -> None:
        for layer in self.cache.layers:
            layer.reorder_cache(index)
        self.mask = self.mask[index]

    def _forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        out = self.body(
            input_ids=ids, attention_mask=self.mask, position_ids=positions, past_key_values=self.cache, use_cache=True
        )
        return out.last_hidden_state[:, -1]  # (b, H): left padding puts every row's last token here


class VisionDecoder(HFDecoder):
    """`HFDecoder` for a vision-language model's rows with images or videos (`posttrain.models.vision`):
    the prefill embeds the prompts with the vision tower's features at their image and video tokens and runs the
    text decoder at the M-RoPE positions (3, b, P); decode steps are text tokens, whose three
    positions are equal, so `step` takes one position per row as for a text model."""

    def __init__(self, model: nn.Module, max_len: int, vision: Sequence[VisionInputs | None]):
        super().__init__(model, max_len)
        self.model = model
        self.vision = vision  # each row's VisionInputs: rows listing image_positions mark their image tokens there
        weight = next(model.parameters())
        self.stacked = stack_vision(vision, weight.device, weight.dtype)  # every image and video of the batch, in row order

    def positions(self, ids: Tensor, mask: Tensor) -> Tensor:
        """M-RoPE positions (3, b, P) of left-padded prompts."""
        P = ids.shape[1]
        return mrope_positions(self.model, ids, mask, self.stacked, image_token_mask(self.model, ids, P, self.vision, mask),
                               video_token_mask(self.model, ids, P))

    def prefill(self, ids: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
        """Left-padded prompts ids (b, P), mask (b, P), M-RoPE positions (3, b, P) -> last hidden states (b, H)."""
        b, P = ids.shape
        self.mask = torch.zeros(b, self.max_len, dtype=torch.long, device=ids.device)
        self.mask[:, :P] = mask
        self.length = P
        embeds = media_embeddings(self.model, ids, image_token_mask(self.model, ids, P, self.vision, mask), video_token_mask(self.model, ids, P),
                                  self.stacked)  # (b, P, H)
        out = self.body(inputs_embeds=embeds, attention_mask=self.mask, position_ids=positions, cache=self.cache, use_cache=True)
        return out.last_hidden_state[:, -1]  # (b, H)

    def _forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        out = self.body(input_ids=ids, attention_mask=self.mask, position_ids=positions, cache=self.cache, use_cache=True)
        return out.last_hidden_state[:, -1]  # (b, H)
