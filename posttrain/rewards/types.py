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
    batch); it is not given to the reward function.
    """

    data_source: str
    solution_str: str
    ground_truth: Any
    extra_info: dict[str, Any] | None = None
    index: int = 0


@dataclass(frozen=True)
class RewardOutput:
    """Scores for a batch of `RewardInput`, in the same order.

    ``extra`` holds one list per key that any sample's dict return carried besides ``"score"``
    (each list has one value per sample). A sample whose dict lacked a key, returned a plain float,
    or failed gets NaN there, so callers average with a NaN-ignoring mean (`metrics` does).
    ``num_failures`` counts samples scored with the configured failure reward.
    """

    scores: list[float]  # (B,)
    extra: dict[str, list[float]] = field(default_factory=dict)  # each (B,)
    num_failures: int = 0

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
        return result


def _nanmean(values: list[float]) -> float:
    """Mean over the non-NaN values; NaN when there are none."""
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")
