"""Agent episodes as training rows: one row per recorded model call (posttrain.rollout.agent_fn).

An agent function may rewrite its history between calls (drop, summarise, add tool output), so its
calls are not one growing sequence and are not stitched into one: each call is a row of its own,
its prompt the ids the engine was given, its response the ids the engine sampled::

    prompt_ids       the call's templated prompt, left-padded          (B, P)
    response_ids     the sampled ids, right-padded                     (B, T)
    response_mask    1.0 on each sampled id (EOS included when drawn)  (B, T)
    rollout_logprobs the engine's log-probs of them                    (B, T)
    scores           the episode's reward, on every call of it         (B,)
    group_index      the task row's uid: all calls of the row's rollout.n episodes

Every call of an episode thus gets the episode's advantage under an outcome estimator (same score,
same group). The group statistics count calls, not episodes: an episode that made more calls
weighs more in its group's mean and standard deviation. Rows of one group sit together, episodes
in sample order, calls in call order.
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.records import RolloutBatch
from posttrain.rollout.agent_fn import AgentEpisode


def episode_rows(episodes: list[AgentEpisode], pad_id: int, data_source: str = "agent") -> tuple[RolloutBatch, torch.Tensor]:
    """(the rows, their scores (B,)) of the kept episodes (those with a reward); see the module docstring."""
    order = {g: i for i, g in enumerate(dict.fromkeys(e.task.group for e in episodes))}  # groups in first-seen order
    kept = sorted((e for e in episodes if e.reward is not None), key=lambda e: order[e.task.group])  # stable: samples, calls in order
    calls = [(e, k, c) for e in kept for k, c in enumerate(e.record.calls)]
    prompts = [c.prompt_ids for _, _, c in calls]
    responses = [c.response_ids for _, _, c in calls]
    batch = RolloutBatch(
        prompt_ids=_pad(prompts, pad_id, left=True, dtype=torch.long),  # (B, P)
        prompt_mask=_pad([[1.0] * len(p) for p in prompts], 0.0, left=True, dtype=torch.float32),  # (B, P)
        response_ids=_pad(responses, pad_id, left=False, dtype=torch.long),  # (B, T)
        response_mask=_pad([[1.0] * len(r) for r in responses], 0.0, left=False, dtype=torch.float32),  # (B, T)
        rollout_logprobs=_pad([c.logprobs for _, _, c in calls], 0.0, left=False, dtype=torch.float32),  # (B, T)
        weights_version=torch.tensor([c.version for _, _, c in calls], dtype=torch.long),  # (B,)
        group_index=[e.task.group for e, _, _ in calls],
        data_source=[_source(e.task.row, data_source) for e, _, _ in calls],
        ground_truth=[_truth(e.task.row) for e, _, _ in calls],
        extra_info=[{"episode": f"{e.task.group}/{e.task.sample}", "call": k, "calls": len(e.record.calls), "failed": e.failed is not None}
                    for e, k, _ in calls],
        raw_prompt=[None] * len(calls),
    )
    scores = torch.tensor([float(e.reward) for e, _, _ in calls], dtype=torch.float32)  # (B,) the episode's reward
    return batch, scores


def _source(row: dict[str, Any], default: str) -> str:
    value = row.get("data_source")
    return value if isinstance(value, str) else default


def _truth(row: dict[str, Any]) -> Any:
    reward_model = row.get("reward_model")
    return reward_model.get("ground_truth") if isinstance(reward_model, dict) else None


def _pad(rows: list[list[Any]], value: Any, left: bool, dtype: torch.dtype) -> torch.Tensor:
    width = max([1, *(len(r) for r in rows)])  # no rows still gives a (0, 1) tensor
    if not rows:
        return torch.zeros(0, width, dtype=dtype)
    return torch.tensor([([value] * (width - len(r)) + r) if left else (r + [value] * (width - len(r))) for r in rows], dtype=dtype)
