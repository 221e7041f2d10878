"""Typed records of multi-turn episodes and their conversion into the `RolloutBatch` the learner trains on.

A trajectory is one prompt (the instruction and the first observation) followed by one response
that interleaves the model's actions with the environment's observations::

    prompt | action 1 | observation 1 | action 2 | observation 2 | action 3
             model      environment      model     environment      model

Only the model's tokens are trained: `loss_mask` (the batch's `train_mask`) is 1.0 on them and 0.0
on the environment's, which are context. `response_mask` stays 1.0 on every real token of both
kinds, because the forward reads it as the attention mask: the model must see the observations when
its log-probs are recomputed, exactly as it saw them while sampling. A trajectory always ends with
an action, so the sequence score sits on a model token (`posttrain.rewards.placement`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from posttrain.records import RolloutBatch


@dataclass(frozen=True)
class Turn:
    """One action of the model and what the environment answered."""

    action: tuple[int, int]  # [start, end) of the model's tokens in the response
    observation: tuple[int, int]  # [start, end) of the environment's tokens after it; empty after the last action
    action_text: str  # the model's text, special tokens removed
    reward: float  # the env's reward plus any format penalty
    valid: bool  # the action matched the pattern and the env accepted it


@dataclass
class Trajectory:
    """One episode of one environment, as tokens and per-turn records."""

    tag: str  # the custom_envs entry
    seed: int
    group: str  # the GRPO group: environments of one group share tag and seed
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    model_mask: list[float] = field(default_factory=list)  # 1.0 on the model's tokens, 0.0 on the env's
    logprobs: list[float] = field(default_factory=list)  # the sampler's log-probs; 0.0 on env tokens
    turns: list[Turn] = field(default_factory=list)
    done: bool = False  # the environment ended the episode
    success: bool = False  # info["success"] of the last step
    truncated: bool = False  # cut by max_steps or the token budget before the env ended it
    observation: str | list[dict[str, str]] = ""  # the latest observation (a tool env: its tool messages)

    @property
    def reward(self) -> float:
        """The trajectory's score: the sum of its turns' rewards."""
        return sum(t.reward for t in self.turns)

    def add(self, ids: Sequence[int], logprobs: Sequence[float] | None) -> tuple[int, int]:
        """Append tokens, the model's when `logprobs` is given, else the environment's; their span."""
        start = len(self.response_ids)
        self.response_ids.extend(int(i) for i in ids)
        self.model_mask.extend([1.0 if logprobs is not None else 0.0] * len(ids))
        self.logprobs.extend([float(x) for x in logprobs] if logprobs is not None else [0.0] * len(ids))
        return start, len(self.response_ids)


def _pad(rows: list[list[Any]], value: Any, left: bool, dtype: torch.dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = [([value] * (width - len(r)) + r) if left else (r + [value] * (width - len(r))) for r in rows]
    return torch.tensor(out, dtype=dtype)


def to_rollout_batch(trajectories: Sequence[Trajectory], pad_id: int, version: int, raw_prompts: Sequence[str]) -> RolloutBatch:
    """The trajectories as rows of a `RolloutBatch` (see the module docstring for the masks)."""
    prompts = [t.prompt_ids for t in trajectories]
    responses = [t.response_ids for t in trajectories]
    return RolloutBatch(
        prompt_ids=_pad(prompts, pad_id, True, torch.long),  # (B, P) left-padded
        prompt_mask=_pad([[1.0] * len(p) for p in prompts], 0.0, True, torch.float32),  # (B, P)
        response_ids=_pad(responses, pad_id, False, torch.long),  # (B, T) right-padded
        response_mask=_pad([[1.0] * len(r) for r in responses], 0.0, False, torch.float32),  # (B, T) every real token
        rollout_logprobs=_pad([t.logprobs for t in trajectories], 0.0, False, torch.float32),  # (B, T)
        weights_version=torch.full((len(trajectories),), version, dtype=torch.long),  # (B,)
        group_index=[t.group for t in trajectories],
        data_source=[t.tag for t in trajectories],
        ground_truth=[None] * len(trajectories),
        extra_info=[{"seed": t.seed, "turns": len(t.turns), "invalid_actions": sum(not x.valid for x in t.turns),
                     "success": t.success, "done": t.done} for t in trajectories],
        raw_prompt=list(raw_prompts),
        loss_mask=_pad([t.model_mask for t in trajectories], 0.0, False, torch.float32),  # (B, T) model tokens only
    )
