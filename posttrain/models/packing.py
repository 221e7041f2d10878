"""Packing prompt + response sequences into fewer rows, so a forward pass computes no padding.

A batch of left-padded prompts and right-padded responses is (B, P + T) wide, but sampled responses
have very different lengths: with 64-token completions from a model that stops at random, about
40 % of a (B, P + T) batch is padding that the forward and backward passes compute for nothing.
Packing places the real tokens of several sequences one after another in a row of width W (the
longest sequence), first-fit by decreasing length, with position ids restarting at 0 for each
sequence. transformers builds a block-diagonal causal mask from such position ids (its "packed
sequence" detection, used when no attention mask is given and no cache), so each token attends to
its own sequence only and the hidden states equal the padded batch's up to float rounding.

That detection is a property of the model code, not of the math, so `packing_supported` checks it
once per model and attention kernel on a tiny input; models without it keep the padded path.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import Tensor, nn

# Pack only when it removes at least this share of the padded batch's token slots: below that the
# saving does not pay for building the packed batch and its 4-D mask.
MIN_SAVING = 0.1

_SUPPORTED: "weakref.WeakKeyDictionary[nn.Module, dict[str, bool]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class PackedBatch:
    """Real tokens of B sequences in K <= B rows, and where each response token's predictor went."""

    input_ids: Tensor  # (K, W)
    position_ids: Tensor  # (K, W): 0, 1, ... within each sequence
    gather: Tensor  # (B, T) long: flat index into the (K * W) positions predicting response token t
    valid: Tensor  # (B, T) bool: t is a real response token
    attention_mask: Tensor | None = None  # (K, 1, W, W) bool, True = attend; None: from position ids
    slots: Tensor | None = None  # (K, W) bool: the slots holding a real token (not a row's unused tail)
    token_rows: Tensor | None = None  # (K, W) long: the source row of each slot's token, -1 on unused slots
    token_positions: Tensor | None = None  # (K, W) long: its place among its row's real tokens, -1 on unused slots


def _contiguous(mask: Tensor, counts: Tensor, *, left: bool) -> bool:
    """Whether every row's real tokens form one block at the left/right end (the record layout)."""
    cols = torch.arange(mask.shape[1], device=mask.device)  # (P,) or (T,)
    expected = cols >= mask.shape[1] - counts[:, None] if left else cols < counts[:, None]
    return bool(torch.equal(mask > 0, expected))


def _first_fit(lengths: list[int], width: int) -> tuple[list[int], list[int], int]:
    """First-fit decreasing bin packing: (bin, offset) per sequence and the number of bins."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    free: list[int] = []
    bins, offsets = [0] * len(lengths), [0] * len(lengths)
    for i in order:
        for b, room in enumerate(free):
            if room >= lengths[i]:
                break
        else:
            b = len(free)
            free.append(width)
        bins[i], offsets[i] = b, width - free[b]
        free[b] -= lengths[i]
    return bins, offsets, len(free)


def pack_batch(
    prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor, pad_id: int = 0
) -> PackedBatch | None:
    """Packed rows for a prompt/response batch, or None when packing would save little or the masks
    are not the record layout (prompt real tokens flush right, response real tokens flush left)."""
    B, P = prompt_ids.shape
    T = response_ids.shape[1]
    a = prompt_mask.sum(1).long()  # (B,) real prompt tokens
    c = response_mask.sum(1).long()  # (B,) real response tokens
    if bool((a == 0).any()) or not (_contiguous(prompt_mask, a, left=True) and _contiguous(response_mask, c, left=False)):
        return None
    lengths = (a + c).tolist()
    width = max(lengths)
    bins, offsets, K = _first_fit(lengths, width)
    padded_slots = B * (int(a.max()) + int(c.max()))
    if K * width > (1.0 - MIN_SAVING) * padded_slots:
        return None
    device = prompt_ids.device
    real = torch.cat([prompt_mask, response_mask], dim=1) > 0  # (B, P + T)
    tokens = torch.cat([prompt_ids, response_ids], dim=1)[real]  # (N,) row by row
    L = a + c  # (B,)
    starts = torch.tensor(bins, device=device) * width + torch.tensor(offsets, device=device)  # (B,)
    first = torch.cumsum(L, 0) - L  # (B,) index of each row's first token in `tokens`
    within = torch.arange(tokens.shape[0], device=device) - first.repeat_interleave(L)  # (N,)
    dest = starts.repeat_interleave(L) + within  # (N,)
    input_ids = torch.full((K * width,), pad_id, dtype=prompt_ids.dtype, device=device)
    input_ids[dest] = tokens
    # Unused tail slots get position 0: they open a segment of their own and come after every real
    # token of their row, so causality keeps them out of the real tokens' attention either way.
    position_ids = torch.zeros(K * width, dtype=torch.long, device=device)
    position_ids[dest] = within
    slots = torch.zeros(K * width, dtype=torch.bool, device=device)
    slots[dest] = True
    token_rows = torch.full((K * width,), -1, dtype=torch.long, device=device)
    token_rows[dest] = torch.arange(B, device=device).repeat_interleave(L)
    token_positions = torch.full((K * width,), -1, dtype=torch.long, device=device)
    token_positions[dest] = within
    t = torch.arange(T, device=device)  # (T,)
    valid = t[None, :] < c[:, None]  # (B, T)
    gather = (starts + a - 1)[:, None] + t[None, :]  # (B, T): token t is predicted by position a - 1 + t
    gather = torch.where(valid, gather, 0)
    return PackedBatch(input_ids.view(K, width), position_ids.view(K, width), gather, valid, slots=slots.view(K, width),
                       token_rows=token_rows.view(K, width), token_positions=token_positions.view(K, width))


@torch.no_grad()
def packing_supported(model: nn.Module) -> bool:
    """Whether the model's decoder keeps packed sequences apart (checked once per attention kernel).

    Two short sequences packed in one row must give the hidden states they give alone.
    """
    kernel = str(getattr(model.config, "_attn_implementation", None))
    known = _SUPPORTED.setdefault(model, {})
    if kernel not in known:
        body = model.get_decoder()
        device = next(model.parameters()).device
        vocab = getattr(model.config, "get_text_config", lambda: model.config)().vocab_size
        first = torch.tensor([[1, 2, 3]], device=device) % vocab
        second = torch.tensor([[4, 5]], device=device) % vocab
        was_training = model.training
        model.eval()
        try:
            alone = [body(input_ids=x, use_cache=False).last_hidden_state[0] for x in (first, second)]
            packed = body(
                input_ids=torch.cat([first, second], 1), position_ids=torch.tensor([[0, 1, 2, 0, 1]], device=device),
                attention_mask=None, use_cache=False,
            ).last_hidden_state[0]
        finally:
            model.train(was_training)
        expected = torch.cat(alone).float()
        err = float((packed.float() - expected).abs().max())
        known[kernel] = err <= 1e-4 * max(1.0, float(expected.abs().max()))
    return known[kernel]


@dataclass(frozen=True)
class PackedSequences:
    """Whole sequences (no prompt/response split) packed into K rows; what a reward model reads."""

    input_ids: Tensor  # (K, W)
    position_ids: Tensor  # (K, W): 0, 1, ... within each sequence
    starts: Tensor  # (B,) long: flat index into the (K * W) slots of each sequence's first token


def pack_sequences(sequences: list[list[int]], pad_id: int = 0, device: torch.device | str = "cpu") -> PackedSequences:
    """First-fit decreasing packing of token lists into rows as wide as the longest one."""
    lengths = [len(s) for s in sequences]
    width = max(lengths)
    bins, offsets, K = _first_fit(lengths, width)
    input_ids = torch.full((K * width,), pad_id, dtype=torch.long)
    position_ids = torch.zeros(K * width, dtype=torch.long)  # unused tail slots: position 0, see pack_batch
    starts = torch.tensor([b * width + o for b, o in zip(bins, offsets)], dtype=torch.long)  # (B,)
    for start, seq in zip(starts.tolist(), sequences):
        input_ids[start : start + len(seq)] = torch.tensor(seq, dtype=torch.long)
        position_ids[start : start + len(seq)] = torch.arange(len(seq))
    return PackedSequences(input_ids.view(K, width).to(device), position_ids.view(K, width).to(device), starts.to(device))
