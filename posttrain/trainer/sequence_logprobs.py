"""Log-probs of the trained tokens of right-padded SFT/DPO sequences.

RL batches keep prompt and response apart (`posttrain.models.response_logprobs`); SFT and DPO
batches are whole conversations with a loss mask, so the targets are the sequence shifted by one:
position s predicts token s + 1, and it counts when token s + 1 is trained (loss_mask 1). The head
runs only on those positions, through the same `token_logprobs_from_hidden` the actor and reference
use, so SFT, DPO and RL log-probs agree to float rounding and never build (B, S, V) logits.

Right padding needs no position ids: real tokens sit at 0..len-1 in every row, and causal attention
keeps padding after them from changing any real position's hidden state. So a row's log-probs do not
depend on which other rows share its micro-batch, which is what makes gradient accumulation exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from posttrain.data import SequenceBatch
from posttrain.models.logprobs import token_logprobs_from_hidden
from posttrain.models.moe import note_tokens
from posttrain.models.ulysses import current_group, ulysses_hidden_states


@dataclass
class SequenceLogProbs:
    """Per-token log-probs of the trained tokens of a `SequenceBatch`."""

    logprobs: Tensor  # (B, S-1) fp32; log pi(token s+1 | tokens <= s), 0 where not trained
    mask: Tensor  # (B, S-1) fp32; loss_mask shifted left by one

    def sums(self) -> Tensor:
        """Sequence log-prob: the sum over the trained tokens of each row (DPO's log pi(y|x))."""
        return (self.logprobs * self.mask).sum(-1)  # (B,)


def sequence_logprobs(model: nn.Module, batch: SequenceBatch, *, chunk_tokens: int | None = None) -> SequenceLogProbs:
    """Log-prob of every trained token of `batch` under `model` (with or without gradients)."""
    device = next(model.parameters()).device
    width = int(batch.attention_mask.sum(-1).max())  # columns that are padding in every row are cut
    input_ids = batch.input_ids[:, :width].to(device)  # (B, S)
    attention_mask = batch.attention_mask[:, :width].to(device)  # (B, S)
    mask = batch.loss_mask[:, 1:width].to(device).float()  # (B, S-1)
    note_tokens(attention_mask > 0)  # an open router capture counts only these (posttrain.models.moe)
    sp = current_group()
    if sp is not None:  # each sequence split over the sp ranks (posttrain.models.ulysses)
        positions = torch.arange(width, device=device)[None].expand(len(input_ids), width)  # (B, S)
        last_hidden = ulysses_hidden_states(model, input_ids, positions, attention_mask, sp)
    else:
        last_hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    hidden = last_hidden[:, :-1]  # (B, S-1, H): position s predicts token s + 1
    targets = input_ids[:, 1:]  # (B, S-1)
    real = mask > 0  # (B, S-1)
    logprobs, _ = token_logprobs_from_hidden(model, hidden[real], targets[real], chunk_tokens=chunk_tokens)  # (N,)
    full = torch.zeros(targets.shape, dtype=torch.float32, device=device)  # (B, S-1)
    return SequenceLogProbs(logprobs=full.masked_scatter(real, logprobs), mask=mask)
