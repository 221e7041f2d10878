"""The naive reward manager: score each sample in turn, in this process.

Cheapest when the function is fast (no process start-up, no pickling). It cannot stop a function
that hangs: use the parallel manager, whose ``timeout_s`` bounds every call.
"""

from __future__ import annotations

from typing import Any, Callable

from posttrain.rewards.evaluate import FailurePolicy, evaluate_one, label_of
from posttrain.rewards.types import RewardInput, RewardOutput


class NaiveRewardManager:
    """Calls ``fn`` on each sample in order; failures follow ``on_error`` (see `evaluate`)."""

    def __init__(self, fn: Callable[..., Any], *, on_error: str = "raise", failure_reward: float = 0.0):
        self.fn = fn
        self.policy = FailurePolicy(label_of(fn), on_error, failure_reward)

    def score(self, samples: list[RewardInput]) -> RewardOutput:
        """Score a batch; the output keeps the order of ``samples``."""
        return self.policy.finish(samples, [evaluate_one(self.fn, s) for s in samples])

    def close(self) -> None:
        """Nothing to release; present so every manager can be closed the same way."""

    def __enter__(self) -> "NaiveRewardManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
