"""Environment faults: a call that raises, hangs or returns something malformed ends its episode,
not the run, until too many episodes of one step fail.

Every `reset`, `step` and `state` call of the agent loop goes through `call_env`. With a timeout,
the call runs in a daemon thread and the loop waits at most that long for it: a hung environment
costs the others of its turn one timeout, once, and is never called again (its thread is left to
finish on its own; Python cannot stop it). A failed call raises `EnvFailure` with the message that
names the environment's tag and class, the seed and the turn; the loop ends that trajectory with
the configured penalty and logs the message. `FailureCount` turns too many failures in one step
(`env.max_failure_rate` of its episodes) into one `EnvError` carrying the first failure's message.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.envs.base import EnvError

log = logging.getLogger(__name__)


class EnvFailure(Exception):
    """One environment call failed; `str(self)` says which env, seed and turn, and how."""


@dataclass(frozen=True)
class FaultPolicy:
    """What the loop does when an environment call fails (`env.step_timeout`, ...)."""

    step_timeout: float | None = None  # seconds a reset/step/state call may take; None: wait forever
    failure_penalty: float = 0.0  # reward of the turn whose env call failed (<= 0)
    max_failure_rate: float = 0.0  # share of a step's episodes that may fail before the run stops


def call_env(fn: Callable[[], Any], timeout: float | None, head: str, what: str) -> Any:
    """`fn()`, or `EnvFailure('<head>: <what> raised ...')` when it raises or takes longer than
    `timeout` seconds."""
    if timeout is None:
        try:
            return fn()
        except Exception as e:
            raise EnvFailure(f"{head}: {what} raised {type(e).__name__}: {e}") from e
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the loop's thread below
            box["error"] = e

    worker = threading.Thread(target=run, name=f"env {what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise EnvFailure(f"{head}: {what} took longer than env.step_timeout ({timeout:g} s); the environment was abandoned")
    if "error" in box:
        e = box["error"]
        raise EnvFailure(f"{head}: {what} raised {type(e).__name__}: {e}") from e
    return box["value"]


@dataclass
class FailureCount:
    """The failed episodes of one `run_episodes` call, checked against `max_failure_rate`."""

    episodes: int
    policy: FaultPolicy
    messages: list[str] = field(default_factory=list)

    def add(self, failure: EnvFailure | EnvError) -> None:
        """Record a failed episode; raise `EnvError` once the failures exceed the allowed share."""
        self.messages.append(str(failure))
        allowed = self.policy.max_failure_rate * self.episodes
        if len(self.messages) > allowed:
            raise EnvError(
                f"{self.messages[0]} ({len(self.messages)} of {self.episodes} episodes of this step failed, more than "
                f"env.max_failure_rate {self.policy.max_failure_rate:g} allows; fix the environment or raise env.max_failure_rate)"
            )
        log.warning("%s: trajectory ended as failed (reward %g)", failure, self.policy.failure_penalty)
