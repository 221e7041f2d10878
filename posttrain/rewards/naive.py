"""The naive reward manager: score each sample in turn, in this process.

Cheapest when the function is fast (no process start-up, no pickling). ``timeout_s`` bounds every
call by interrupting it in-process (`posttrain.rewards.deadline`): that stops pure-Python loops and
blocking waits, but not a C call that never returns; the parallel manager, whose worker processes
are killed, bounds those too.
"""

from __future__ import annotations

from typing import Any, Callable

from posttrain.errors import ConfigError
from posttrain.rewards.deadline import Deadline
from posttrain.rewards.evaluate import FailurePolicy, SampleResult, evaluate_one, label_of
from posttrain.rewards.types import RewardInput, RewardOutput

# Failures that end the batch at once under on_error='raise', instead of after the other samples:
# a hang costs timeout_s per sample, and a function that tries to exit will do so again.
STOP_AT_ONCE = frozenset({"timeout", "exited"})


class NaiveRewardManager:
    """Calls ``fn`` on each sample in order; failures follow ``on_error`` (see `evaluate`)."""

    def __init__(
        self, fn: Callable[..., Any], *, on_error: str = "raise", failure_reward: float = 0.0, timeout_s: float = 60.0
    ):
        if not timeout_s > 0:
            raise ConfigError(f"reward.timeout_s: must be > 0 seconds, got {timeout_s!r}")
        self.fn = fn
        self.timeout_s = float(timeout_s)
        self.policy = FailurePolicy(label_of(fn), on_error, failure_reward)
        self.deadline = Deadline()

    def score(self, samples: list[RewardInput]) -> RewardOutput:
        """Score a batch; the output keeps the order of ``samples``."""
        results: list[SampleResult] = []
        for sample in samples:
            result = evaluate_one(self.fn, sample, self.deadline, self.timeout_s)
            results.append(result)
            failure = result.failure
            if failure is not None and failure.kind in STOP_AT_ONCE and self.policy.must_raise(failure):
                raise self.policy.error(sample, failure)
        return self.policy.finish(samples, results)

    def close(self) -> None:
        """Stop the deadline's watchdog thread (if one was needed) and release SIGALRM."""
        self.deadline.close()

    def __enter__(self) -> "NaiveRewardManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
