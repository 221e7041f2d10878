"""Turn rows: an agentic batch of episode rows cut into one training row per model turn (`env.train_rows: turn`).

An episode row holds the whole episode as one response (`posttrain.rollout.trajectory`)::

    prompt | action 1 | observation 1 | action 2 | observation 2 | action 3

Cut into turn rows, turn k becomes its own row: its prompt is everything the engine was shown
before the action (the episode's prompt and the response up to the action's first token, rendered
once by the agent loop's `TurnRenderer`), its response the action's tokens only::

    row 1: prompt                                        | action 1
    row 2: prompt | action 1 | observation 1             | action 2
    row 3: prompt | action 1 | observation 1 | action 2 | observation 2 | action 3

This is Trinity-RFT's `multi_step_grpo` experience layout and ROLL's `StepEnvManager` sample layout:
one experience per step. The cut happens after the advantages, so every per-token tensor of the
episode row (log-probs, reference log-probs, values, advantages, returns, masks) is sliced over the
action's columns: an outcome estimator's episode advantage (GRPO over the env group) is broadcast to
each of the episode's turn rows, a step-level one's (GiGPO) keeps each turn's own. The slices are
exact because a causal model's log-prob of an action token depends only on the tokens before it,
which are the same in both layouts. What changes is the loss: its aggregation counts turn rows as
sequences (seq-mean-token-mean weighs each turn alike, not each episode), and mini-batches count
turn rows (`turn_mini_batch_size`).

In a window prompt mode (posttrain.envs.window) each action was sampled after a prompt of its own,
which the episode row cannot hold: its response is the actions only and ``extra_info["turn_prompts"]``
keeps the prompts. Its turn rows take those prompts, and every forward pass (old and reference
log-probs, values) runs on the turn rows and is written back onto the episode row's action columns
(`windowed`), so advantages are still computed on episode rows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch

from posttrain.errors import ConfigError
from posttrain.records import RolloutBatch


def turn_spans(batch: RolloutBatch) -> list[tuple[int, int, int, int]]:
    """(row, turn, start, end) of every model turn with at least one token, in row then turn order."""
    out = []
    for b, info in enumerate(batch.extra_info):
        if "turn_spans" not in info:
            raise ValueError(f"row {b} has no turn records: turn rows need an agentic batch (posttrain.rollout.trajectory)")
        out += [(b, k, int(s), int(e)) for k, (s, e) in enumerate(info["turn_spans"]) if e > s]
    return out


def turn_rows(batch: RolloutBatch, pad_id: int) -> RolloutBatch:
    """One row per model turn of every episode row (see the module docstring); episodes whose every
    action is empty (an env that failed at reset) give none."""
    if batch.vision is not None and any(v is not None for v in batch.vision):
        raise ConfigError("env.train_rows: turn cuts each episode into a row per action, which would part an episode's pictures "
                          "(image observations) from the turns that show them; set env.train_rows: episode for environments "
                          "that show images")
    spans = turn_spans(batch)
    rows = torch.tensor([b for b, _, _, _ in spans], dtype=torch.long)  # (B',) the episode row of each turn row
    prompt_len = batch.prompt_mask.sum(1).long().tolist()  # real prompt tokens per episode row
    width_t = max((e - s for _, _, s, e in spans), default=1)
    device = batch.response_ids.device
    contexts = [_context(batch, b, k, s, prompt_len[b]) for b, k, s, _ in spans]
    width_p = max((len(c) for c in contexts), default=1)
    prompt_ids = torch.full((len(spans), width_p), pad_id, dtype=torch.long, device=device)  # (B', P') left-padded
    prompt_mask = torch.zeros(len(spans), width_p, device=device)  # (B', P')
    for i, context in enumerate(contexts):
        prompt_ids[i, width_p - len(context):] = context
        prompt_mask[i, width_p - len(context):] = 1.0
    out: dict[str, Any] = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask}
    for f in dataclasses.fields(batch):
        if f.name in out:
            continue
        value = getattr(batch, f.name)
        if value is None or f.name == "routes":  # an episode row's recorded experts do not fit a turn row (router replay refuses turn rows)
            out[f.name] = None
        elif f.metadata.get("pad") == "right":  # (B, T) aligned with the response: the action's columns
            out[f.name] = _slice_right(value, spans, width_t, pad_id if f.name == "response_ids" else 0)
        elif isinstance(value, torch.Tensor):  # (B,) per row
            out[f.name] = value[rows.to(value.device)]
        elif f.name == "extra_info":
            out[f.name] = [_turn_info(batch.extra_info[b], k) for b, k, _, _ in spans]
        else:  # per-row lists (group_index, data_source, ...)
            out[f.name] = [value[b] for b, _, _, _ in spans]
    return RolloutBatch(**out)


def _context(batch: RolloutBatch, b: int, k: int, start: int, prompt_len: int) -> torch.Tensor:
    """What the engine was shown before turn k of row b: its window prompt, else the episode's prefix."""
    prompts = batch.extra_info[b].get("turn_prompts")
    if prompts is not None:
        return torch.tensor(prompts[k], dtype=torch.long, device=batch.response_ids.device)
    return torch.cat([batch.prompt_ids[b, batch.prompt_mask.shape[1] - prompt_len:], batch.response_ids[b, :start]])


def is_windowed(batch: RolloutBatch) -> bool:
    """Whether the batch's rows were played in a window prompt mode (each action after its own prompt)."""
    return bool(batch.extra_info) and "turn_prompts" in batch.extra_info[0]


def windowed(forward: Callable[[RolloutBatch], Any], batch: RolloutBatch, pad_id: int) -> Any:
    """`forward`'s per-token result (B, T, ...), or tuple of them, on the episode rows: itself, or for
    windowed rows computed on their turn rows (each action after its own prompt) and written onto the
    actions' columns (the rest, padding only, stays 0)."""
    if not is_windowed(batch):
        return forward(batch)
    rows = turn_rows(batch, pad_id)
    per_turn = forward(rows)  # (B', T', ...) or a tuple of them
    spans = turn_spans(batch)

    def place(value: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((*batch.response_ids.shape, *value.shape[2:]), dtype=value.dtype, device=value.device)  # (B, T, ...)
        for i, (b, _, s, e) in enumerate(spans):
            out[b, s:e] = value[i, : e - s]
        return out

    return tuple(place(v) for v in per_turn) if isinstance(per_turn, tuple) else place(per_turn)


def _slice_right(value: torch.Tensor, spans: list[tuple[int, int, int, int]], width: int, pad: float) -> torch.Tensor:
    cut = torch.full((len(spans), width, *value.shape[2:]), pad, dtype=value.dtype, device=value.device)  # (B', T', ...) right-padded
    for i, (b, _, s, e) in enumerate(spans):
        cut[i, : e - s] = value[b, s:e]
    return cut


def _turn_info(info: dict[str, Any], k: int) -> dict[str, Any]:
    """The episode row's records, its turn records narrowed to turn k (now the row's only turn)."""
    s, e = info["turn_spans"][k]
    narrowed = {"turn_spans": [[0, e - s]], "turn_rewards": [info["turn_rewards"][k]], "turn_states": [info["turn_states"][k]]}
    if "turn_prompts" in info:  # a windowed turn row is a one-turn episode after its own prompt
        narrowed["turn_prompts"] = [info["turn_prompts"][k]]
    return {**info, **narrowed, "turn": k}


def turn_mini_batch_rows(rows: int, fixed: int | None, updates: int) -> int:
    """Turn rows per optimizer step: `fixed` (env.turn_mini_batch_size) when set, else the step's
    rows shared over the `updates` mini-batches an episode step of the same config takes (data.train_batch_size /
    ppo_mini_batch_size), rounded up, so a step never takes more optimizer steps than with episode rows.

    >>> turn_mini_batch_rows(10, None, 4), turn_mini_batch_rows(10, 4, 4), turn_mini_batch_rows(3, None, 1)
    (3, 4, 3)
    """
    return fixed if fixed is not None else max(1, math.ceil(rows / max(updates, 1)))
