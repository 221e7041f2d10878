"""The records a dataset yields (one row each) and the batches collate functions build from them.

Plain dataclasses of python lists and torch tensors. RL prompts are collated straight into the
rollout engine's input record, `posttrain.records.PromptBatch` (one type from the file to the
engine); prompts are left-padded (generation continues on the right of every prompt at the same
position); SFT/DPO sequences are right-padded (no generation, the loss mask decides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from posttrain.records import PromptBatch, VisionInputs


@dataclass
class RLExample:
    """One RL prompt: its token ids and what the reward function needs to score the response."""

    index: int  # global row index across the dataset's files
    prompt_ids: list[int]  # chat-templated prompt, truncated to max_prompt_length
    prompt: str | list[dict[str, str]]  # the prompt cell as in the file (string or messages)
    data_source: str  # the reward_fn_key column; "" when a file has no data_source column
    ground_truth: Any  # reward_model.ground_truth, else the response_key column, else None
    extra_info: dict[str, Any]
    raw_chat: list[dict[str, str]] | None = None  # messages before the template (data.return_raw_chat)
    full_prompt: str | None = None  # text after the template (data.return_full_prompt)
    vision: VisionInputs | None = None  # the prompt's images (data.image_key with a vision-language policy)


@dataclass
class SFTExample:
    """One supervised sequence: ids and a mask that is 1 on the tokens the loss trains on."""

    index: int
    input_ids: list[int]  # prompt + response, truncated to max_length
    loss_mask: list[int]  # 1 on response/assistant tokens, 0 on prompt/system/user tokens
    vision: VisionInputs | None = None  # the row's images (the mix losses' expert rows with a vision-language policy)


@dataclass
class DPOExample:
    """One preference pair: the same prompt completed by the chosen and the rejected response."""

    index: int
    chosen: SFTExample
    rejected: SFTExample


@dataclass
class SequenceBatch:
    """Right-padded SFT sequences."""

    input_ids: torch.Tensor  # (B, S) long, pad id on the right
    attention_mask: torch.Tensor  # (B, S) long
    loss_mask: torch.Tensor  # (B, S) float, 1.0 on trained tokens, 0.0 on prompt and padding
    indices: list[int]

    def __len__(self) -> int:
        return len(self.indices)


@dataclass
class PreferenceBatch:
    """Chosen and rejected sequences of the same pairs, row i of each from the same example."""

    chosen: SequenceBatch
    rejected: SequenceBatch


def _pad(rows: Sequence[Sequence[int]], value: int, *, left: bool) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)  # (B, width)
    for i, r in enumerate(rows):
        if r:
            if left:
                out[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            else:
                out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def collate_prompts(examples: Sequence[RLExample], pad_id: int, uid_prefix: str = "p") -> PromptBatch:
    """Left-pad prompt ids to the batch's longest prompt (P) with `pad_id`.

    Each prompt's uid is `{uid_prefix}-{row index}`: it names the group of the prompt's responses,
    so the trainer passes a prefix unique to the step (the same row may come back next epoch).
    """
    if not examples:
        raise ValueError("collate_prompts needs at least one example")
    ids = [e.prompt_ids for e in examples]
    input_ids = _pad(ids, pad_id, left=True)  # (B, P)
    attention_mask = _pad([[1] * len(r) for r in ids], 0, left=True).float()  # (B, P)
    return PromptBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        uid=[f"{uid_prefix}-{e.index}" for e in examples],
        data_source=[e.data_source for e in examples],
        ground_truth=[e.ground_truth for e in examples],
        extra_info=[dict(e.extra_info) if isinstance(e.extra_info, dict) else {} for e in examples],
        raw_prompt=[e.full_prompt for e in examples],
        index=[e.index for e in examples],
        raw_chat=[e.raw_chat for e in examples],
        vision=[e.vision for e in examples],
    )


def collate_sft(examples: Sequence[SFTExample], pad_id: int) -> SequenceBatch:
    """Right-pad sequences to the batch's longest (S); padding has attention and loss mask 0."""
    if not examples:
        raise ValueError("collate_sft needs at least one example")
    input_ids = _pad([e.input_ids for e in examples], pad_id, left=False)  # (B, S)
    attention_mask = _pad([[1] * len(e.input_ids) for e in examples], 0, left=False)  # (B, S)
    loss_mask = _pad([e.loss_mask for e in examples], 0, left=False).float()  # (B, S)
    return SequenceBatch(input_ids, attention_mask, loss_mask, [e.index for e in examples])


def collate_dpo(examples: Sequence[DPOExample], pad_id: int) -> PreferenceBatch:
    """Collate the chosen and the rejected sides separately (each right-padded to its own S)."""
    return PreferenceBatch(
        chosen=collate_sft([e.chosen for e in examples], pad_id),
        rejected=collate_sft([e.rejected for e in examples], pad_id),
    )
