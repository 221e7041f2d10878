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
from posttrain.rollout.episode_images import EpisodePictures


@dataclass(frozen=True)
class Turn:
    """One action of the model and what the environment answered."""

    action: tuple[int, int]  # [start, end) of the model's tokens in the response
    observation: tuple[int, int]  # [start, end) of the environment's tokens after it; empty after the last action
    action_text: str  # the model's text, special tokens removed
    reward: float  # the env's reward plus any format penalty
    valid: bool  # the action matched the pattern and the env accepted it
    state: Any = None  # the env's state when the action was taken (hashable; GiGPO's anchor)


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
    observation: Any = ""  # the latest observation: a str, an image, or a tool env's tool messages
    suffix: str = ""  # the env's suffix() after that observation ("" when it has none)
    tools: list[dict[str, Any]] | None = None  # prompt_mode messages: the env's tools() the template writes, None for none
    failed: str | None = None  # why an env call failed and ended the episode (posttrain.rollout.env_guard), else None
    # a window prompt mode (posttrain.envs.window): each action's own prompt and the observation it showed
    turn_prompts: list[list[int]] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    timed_out: bool = False  # still running at the loop's deadline (explorer.max_timeout): ended there, unfinished
    pictures: EpisodePictures = field(default_factory=EpisodePictures)  # image observations shown (posttrain.rollout.episode_images)

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


def anchor_ids(trajectories: Sequence[Trajectory]) -> list[list[int]]:
    """Per trajectory, an id for each turn's state: equal ids mean the same state within the same
    group (the states of different groups never share an id, even when equal)."""
    ids: dict[tuple[str, Any], int] = {}
    return [[ids.setdefault((t.group, turn.state), len(ids)) for turn in t.turns] for t in trajectories]


def to_rollout_batch(trajectories: Sequence[Trajectory], pad_id: int, version: int, raw_prompts: Sequence[str]) -> RolloutBatch:
    """The trajectories as rows of a `RolloutBatch` (see the module docstring for the masks).

    Each row's extra_info keeps its per-turn records for step-level credit: ``turn_spans`` (the
    [start, end) of every action in the response), ``turn_rewards`` and ``turn_states`` (anchor ids,
    `anchor_ids`); `turn_tensors` turns them into tensors. In a window prompt mode the response holds
    the actions only (each was sampled after its own prompt, not after the one before it) and
    ``turn_prompts`` keeps each action's prompt ids: such a row is trained as turn rows only."""
    prompts = [t.prompt_ids for t in trajectories]
    anchors = anchor_ids(trajectories)
    responses = [t.response_ids for t in trajectories]
    vision = [t.pictures.vision() for t in trajectories]
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
                     "success": t.success, "done": t.done, "failed": t.failed is not None, "turn_spans": [list(x.action) for x in t.turns],
                     "turn_rewards": [x.reward for x in t.turns], "turn_states": a,
                     **({"turn_prompts": t.turn_prompts[: len(t.turns)]} if t.turn_prompts else {})} for t, a in zip(trajectories, anchors)],
        raw_prompt=list(raw_prompts),
        loss_mask=_pad([t.model_mask for t in trajectories], 0.0, False, torch.float32),  # (B, T) model tokens only
        vision=vision if any(v is not None for v in vision) else None,  # the episodes' pictures, None when none showed one
    )


@dataclass(frozen=True)
class TurnTensors:
    """Per-turn records of a batch as tensors (the inputs of step-level advantage estimators)."""

    index: torch.Tensor  # (B, T) long: the turn of each action token, -1 on environment tokens and padding
    rewards: torch.Tensor  # (B, K) float: each turn's reward, 0 past a row's last turn
    states: torch.Tensor  # (B, K) long: anchor-state id of each turn, -1 past a row's last turn


def turn_tensors(extra_info: Sequence[dict[str, Any]], width: int) -> TurnTensors | None:
    """`TurnTensors` of a batch whose rows carry turn records (`to_rollout_batch`), for a response
    width of `width` tokens; None when a row has none (not an agentic batch)."""
    if not extra_info or any("turn_spans" not in row for row in extra_info):
        return None
    k = max(1, max(len(row["turn_spans"]) for row in extra_info))
    index = torch.full((len(extra_info), width), -1, dtype=torch.long)  # (B, T)
    rewards = torch.zeros(len(extra_info), k, dtype=torch.float32)  # (B, K)
    states = torch.full((len(extra_info), k), -1, dtype=torch.long)  # (B, K)
    for b, row in enumerate(extra_info):
        for turn, (start, end) in enumerate(row["turn_spans"]):
            index[b, start:end] = turn
        rewards[b, : len(row["turn_rewards"])] = torch.tensor(row["turn_rewards"], dtype=torch.float32)
        states[b, : len(row["turn_states"])] = torch.tensor(row["turn_states"], dtype=torch.long)
    return TurnTensors(index, rewards, states)
