"""The records that flow into and out of reward scoring.

`RewardInput` is what a reward function sees for one response (verl's four arguments plus the
sample's index, used only to name the sample in errors). `RewardOutput` is what a reward manager
returns for a batch. Neither imports torch, so the worker processes of the parallel manager start
without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RewardInput:
    """One response to score.

    ``index`` identifies the sample in error messages (the trainer passes the row's position in the
    batch); it is not given to the reward function, nor is ``response_length`` (the response's
    tokens, which a reward worker's length penalty reads). ``prompt`` is the sample's question as
    text, filled only for the workers that read it (an LLM judge); empty otherwise. ``group`` is the
    prompt's uid, shared by the responses of one prompt (a group-relative judge reads it); empty
    when unknown.
    """

    data_source: str
    solution_str: str
    ground_truth: Any
    extra_info: dict[str, Any] | None = None
    index: int = 0
    response_length: int = 0
    prompt: str = ""
    group: str = ""


@dataclass(frozen=True)
class WorkerTally:
    """What one reward worker did in a batch: samples scored, the sum of their scores (the
    scorer's, before weight and length penalty), failures, the length-penalty sum, seconds."""

    count: int = 0
    score_sum: float = 0.0
    failures: int = 0
    penalty_sum: float = 0.0
    seconds: float = 0.0

    def __add__(self, other: "WorkerTally") -> "WorkerTally":
        """Two shares of one batch scored side by side: counts add, the time is the longer one."""
        return WorkerTally(self.count + other.count, self.score_sum + other.score_sum, self.failures + other.failures,
                           self.penalty_sum + other.penalty_sum, max(self.seconds, other.seconds))


@dataclass(frozen=True)
class RewardOutput:
    """Scores for a batch of `RewardInput`, in the same order.

    ``extra`` holds one list per key that any sample's dict return carried besides ``"score"``
    (each list has one value per sample). A sample whose dict lacked a key, returned a plain float,
    or failed gets NaN there, so callers average with a NaN-ignoring mean (`metrics` does).
    ``num_failures`` counts samples scored with the configured failure reward. ``workers`` holds
    each reward worker's tally when a router scored the batch (`posttrain.rewards.routing`).
    """

    scores: list[float]  # (B,)
    extra: dict[str, list[float]] = field(default_factory=dict)  # each (B,)
    num_failures: int = 0
    workers: dict[str, WorkerTally] = field(default_factory=dict)

    def tensor(self) -> "torch.Tensor":  # noqa: F821 - torch is imported lazily on purpose
        """The scores as a float32 tensor, shape (B,)."""
        import torch

        return torch.tensor(self.scores, dtype=torch.float32)  # (B,)

    def metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """Batch metrics: the NaN-ignoring mean of each extra key and the failure count.

        >>> out = RewardOutput([1.0, 0.0], {"acc": [1.0, float("nan")]}, num_failures=1)
        >>> out.metrics()
        {'reward/acc': 1.0, 'reward/failures': 1.0}
        """
        result = {f"{prefix}{key}": _nanmean(values) for key, values in self.extra.items()}
        result[f"{prefix}failures"] = float(self.num_failures)
        for name, tally in self.workers.items():
            result.update(worker_metrics(name, tally, prefix))
        return result


def worker_metrics(name: str, tally: WorkerTally, prefix: str = "reward/") -> dict[str, float]:
    """One worker's metrics: mean score (NaN when it scored nothing), samples, failures, seconds,
    and the mean length penalty when it has one.

    >>> worker_metrics("math", WorkerTally(count=4, score_sum=3.0, failures=1, seconds=0.5))
    {'reward/math/mean': 0.75, 'reward/math/count': 4.0, 'reward/math/failures': 1.0, 'reward/math/time_s': 0.5}
    """
    out = {
        f"{prefix}{name}/mean": tally.score_sum / tally.count if tally.count else float("nan"),
        f"{prefix}{name}/count": float(tally.count),
        f"{prefix}{name}/failures": float(tally.failures),
        f"{prefix}{name}/time_s": tally.seconds,
    }
    if tally.penalty_sum:
        out[f"{prefix}{name}/length_penalty"] = tally.penalty_sum / tally.count
    return out


def _nanmean(values: list[float]) -> float:
    """Mean over the non-NaN values; NaN when there are none."""
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")
