"""The frozen reference policy: log-probs under the initial weights, for KL loss or KL in reward."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posttrain.modeling import response_logprobs
from posttrain.records import RolloutBatch
from posttrain.workers.microbatch import micro_batches


class ReferencePolicy:
    """A frozen causal LM; `compute_logprobs` is its only verb."""

    def __init__(self, model: nn.Module, *, temperature: float, micro_batch_size: int, max_tokens: int | None = None):
        self.model = model.eval().requires_grad_(False)
        self.temperature = temperature
        self.micro_batch_size = micro_batch_size
        self.max_tokens = max_tokens

    @torch.inference_mode()
    def compute_logprobs(self, batch: RolloutBatch) -> Tensor:
        """log pi_ref of each response token, (B, T); 0 on padding."""
        return _batched_logprobs(self.model, batch, self.temperature, self.micro_batch_size, self.max_tokens)


def _batched_logprobs(model: nn.Module, batch: RolloutBatch, temperature: float, size: int, max_tokens: int | None) -> Tensor:
    """Log-probs of a whole batch, computed micro-batch by micro-batch in the original row order."""
    out = torch.zeros(batch.response_ids.shape, dtype=torch.float32, device=batch.response_ids.device)  # (B, T)
    start = 0
    if max_tokens is not None:
        packed = batch.split_by_tokens(max_tokens)
        parts = [
            response_logprobs(model, m.prompt_ids, m.prompt_mask, m.response_ids, m.response_mask, temperature=temperature).logprobs
            for m in packed.batches
        ]
        return packed.restore(parts, width=batch.response_ids.shape[1])
    for micro in micro_batches(batch, size=size, max_tokens=None):
        lp = response_logprobs(
            model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask, temperature=temperature
        ).logprobs  # (b, T')
        out[start : start + lp.shape[0], : lp.shape[1]] = lp
        start += lp.shape[0]
    return out
