"""Calling a reward function on one sample and turning what it returns into a score — or a failure.

A reward function can go wrong in six ways: it raises, hangs, crashes its process, tries to end the
process (``sys.exit``), returns something that is not a finite number, or returns a dict without
``"score"``. None
of these is ever scored as a silent 0: with ``on_error="raise"`` the batch stops with a
`RewardFunctionError` naming the function, the data_source, the sample index and the start of the
response; with ``on_error="fixed"`` the sample gets ``failure_reward``, a warning is logged the first
time each kind of failure happens, and `RewardOutput.num_failures` counts them (the trainer logs it
as ``reward/failures``). A `UserError` raised by the function (the task scorers raise one for an
unknown data_source) always stops the batch: it is a setup mistake, not a flaky sample. So does a
function that calls ``sys.exit`` or raises another `BaseException`: uncaught, it would end the run
with its own exit status (0 for ``sys.exit(0)``) and no word of why. `KeyboardInterrupt` is the one
`BaseException` let through: it is how Ctrl-C stops a run, and a function raising it on purpose
cannot be told apart from the user pressing Ctrl-C.
"""

from __future__ import annotations

import logging
import math
import numbers
import sysconfig
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.errors import ConfigError, RewardFunctionError, UserError
from posttrain.rewards import deadline as deadline_module
from posttrain.rewards.deadline import CallTimedOut, Deadline
from posttrain.rewards.types import RewardInput, RewardOutput

logger = logging.getLogger(__name__)

ON_ERROR_CHOICES = ("raise", "fixed")
PREVIEW_CHARS = 200
FIX_HINT = (
    "Fix the function, or set reward.on_error: fixed to score such samples as reward.failure_reward."
)
TIMEOUT_HINT = (
    "Fix the function, raise reward.timeout_s if it needs longer, or set reward.on_error: fixed to score "
    "such samples as reward.failure_reward."
)
EXIT_HINT = (
    "A reward function must return a score (a number, or a dict with a 'score' key); to fail one "
    "sample, raise an Exception, which reward.on_error then handles."
)
# Failures that stop the batch under any on_error: setup mistakes, not flaky samples.
FATAL_KINDS = frozenset({"user_error", "exited"})


@dataclass(frozen=True)
class Failure:
    """Why one sample has no score. ``kind`` groups warnings; ``detail`` completes a sentence."""

    kind: str  # raised | user_error | exited | timeout | crashed | bad_return | non_finite | no_score_key
    detail: str


@dataclass(frozen=True)
class SampleResult:
    """The outcome of scoring one sample: a score (and extra metrics) or a failure."""

    score: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
    failure: Failure | None = None


def label_of(fn: Callable[..., Any]) -> str:
    """The name errors use for a reward function."""
    label = getattr(fn, "label", None)
    if isinstance(label, str):
        return label
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def check_on_error(on_error: str, failure_reward: float) -> None:
    """Validate the two failure-policy options (they come straight from the config)."""
    if on_error not in ON_ERROR_CHOICES:
        raise ConfigError(f"reward.on_error: {on_error!r} is not one of {', '.join(ON_ERROR_CHOICES)}")
    if not isinstance(failure_reward, numbers.Real) or not math.isfinite(failure_reward):
        raise ConfigError(f"reward.failure_reward: must be a finite number, got {failure_reward!r}")


def evaluate_one(
    fn: Callable[..., Any], sample: RewardInput, deadline: Deadline | None = None, timeout_s: float = math.inf
) -> SampleResult:
    """Call ``fn`` with verl's keyword arguments and check what it returns.

    With a ``deadline``, the call is interrupted after ``timeout_s`` seconds (see `deadline`)."""

    def call() -> Any:
        return fn(
            data_source=sample.data_source,
            solution_str=sample.solution_str,
            ground_truth=sample.ground_truth,
            extra_info=sample.extra_info,
        )

    try:
        raw = call() if deadline is None else deadline.run(call, timeout_s)
    except CallTimedOut as exc:
        return SampleResult(failure=Failure("timeout", f"did not return within {timeout_s:g} s and was interrupted{_where(exc)}"))
    except UserError as exc:  # e.g. the task scorers' "no built-in scorer for data_source": a setup mistake
        return SampleResult(failure=Failure("user_error", f"raised {type(exc).__name__}: {exc}"))
    except Exception as exc:  # a user function may raise anything; it becomes a named failure
        return SampleResult(failure=Failure("raised", f"raised {type(exc).__name__}: {exc}{_where(exc)}"))
    except KeyboardInterrupt:
        raise  # Ctrl-C: the run stops as the user asked
    except BaseException as exc:  # sys.exit() or the like: would end the run silently with its own status
        return SampleResult(failure=Failure("exited", _exit_detail(exc)))
    return check_return(raw)


def _exit_detail(exc: BaseException) -> str:
    """'called sys.exit(0) (at file.py:3)' or 'raised Stop: why (a BaseException, ...)'."""
    if isinstance(exc, SystemExit):
        code = "" if exc.code is None else repr(exc.code)
        return f"called sys.exit({code}){_where(exc)}"
    return (
        f"raised {type(exc).__name__}: {exc} (a BaseException, which ends the process instead of failing "
        f"one sample){_where(exc)}"
    )


def check_return(raw: Any) -> SampleResult:
    """Turn a float or ``{"score": float, **metrics}`` into a `SampleResult`.

    >>> check_return({"score": 1, "acc": True, "pred": "42"})
    SampleResult(score=1.0, extra={'acc': 1.0}, failure=None)
    >>> check_return(float("nan")).failure.detail
    'returned nan instead of a finite number'
    """
    extra: dict[str, float] = {}
    value = raw
    if isinstance(raw, dict):
        if "score" not in raw:
            keys = ", ".join(map(str, raw)) or "none"
            detail = f"returned a dict without a 'score' key (keys: {keys})"
            return SampleResult(failure=Failure("no_score_key", detail))
        value = raw["score"]
        # Extra keys become metrics; non-numeric ones (verl functions often return e.g. "pred": str)
        # cannot be averaged and are left out.
        for key, item in raw.items():
            number = _as_float(item)
            if key != "score" and number is not None:
                extra[str(key)] = number
    score = _as_float(value)
    if score is None:
        shown = repr(value)[:80]
        detail = f"returned {shown} ({type(value).__name__}) instead of a number"
        return SampleResult(failure=Failure("bad_return", detail))
    if not math.isfinite(score):
        return SampleResult(failure=Failure("non_finite", f"returned {score} instead of a finite number"))
    return SampleResult(score=score, extra=extra)


def _as_float(value: Any) -> float | None:
    """A Python float for ints, floats, bools, numpy scalars and one-element tensors; else None."""
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # 0-d numpy array or tensor
        item = value.item()
        return float(item) if isinstance(item, numbers.Real) else None
    return None


def _where(exc: BaseException) -> str:
    """' (at file.py:12)' for the innermost frame of the traceback outside installed libraries and
    the standard library, to point at the user's line: a library may wrap sys.exit (wandb does, once
    it has started in the process), which would otherwise be named instead. Frames of the deadline's
    own signal handler are skipped; with only library frames, the innermost is named."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != deadline_module.__file__]
    if not frames:
        return ""
    own = [f for f in frames if not f.filename.startswith(_LIBRARY_DIRS)]
    last = (own or frames)[-1]
    return f" (at {last.filename}:{last.lineno})"


_LIBRARY_DIRS = tuple(sorted({p for k in ("stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_paths().get(k))}))


def failure_message(fn_label: str, sample: RewardInput, failure: Failure) -> str:
    """One sentence naming the function, what went wrong, the sample and the start of its text."""
    preview = sample.solution_str[:PREVIEW_CHARS]
    more = f"... ({len(sample.solution_str)} chars)" if len(sample.solution_str) > PREVIEW_CHARS else ""
    return (
        f"reward function {fn_label} {failure.detail} on sample {sample.index} "
        f"(data_source={sample.data_source!r}); solution_str: {preview!r}{more}"
    )


class FailurePolicy:
    """Applies ``on_error`` to a batch of results; remembers which failure kinds were warned about."""

    def __init__(self, fn_label: str, on_error: str, failure_reward: float):
        check_on_error(on_error, failure_reward)
        self.fn_label = fn_label
        self.on_error = on_error
        self.failure_reward = float(failure_reward)
        self._warned: set[str] = set()

    def finish(self, samples: list[RewardInput], results: list[SampleResult]) -> RewardOutput:
        """Raise for the first failure, or substitute the failure reward; then gather the output."""
        failed = [(s, r.failure) for s, r in zip(samples, results) if r.failure is not None]
        fatal = [(s, f) for s, f in failed if self.must_raise(f)]
        if fatal:
            raise self.error(*fatal[0], also_failed=len(failed) - 1)
        self._warn(failed, len(samples))
        scores = [self.failure_reward if r.failure else r.score for r in results]
        keys = sorted({key for r in results for key in r.extra})
        extra = {key: [r.extra.get(key, math.nan) for r in results] for key in keys}
        return RewardOutput(scores=scores, extra=extra, num_failures=len(failed))

    def must_raise(self, failure: Failure) -> bool:
        """Raise under on_error='raise'; and always for a UserError or an attempt to end the process."""
        return self.on_error == "raise" or failure.kind in FATAL_KINDS

    def error(self, sample: RewardInput, failure: Failure, also_failed: int = 0) -> RewardFunctionError:
        """The error for a failure that stops the batch."""
        others = f" ({also_failed} more samples in this batch failed too.)" if also_failed else ""
        hint = {"user_error": "", "exited": f" {EXIT_HINT}", "timeout": f" {TIMEOUT_HINT}"}.get(failure.kind, f" {FIX_HINT}")
        return RewardFunctionError(f"{failure_message(self.fn_label, sample, failure)}.{others}{hint}")

    def _warn(self, failed: list[tuple[RewardInput, Failure]], batch_size: int) -> None:
        """One warning per failure kind over the manager's life; later ones only count in the metric."""
        counts = Counter(failure.kind for _, failure in failed)
        for sample, failure in failed:
            if failure.kind in self._warned:
                continue
            self._warned.add(failure.kind)
            logger.warning(
                "%d of %d samples failed (%s) and were scored %s (reward.on_error=fixed); first: %s. "
                "Further %r failures are counted in reward/failures without a warning.",
                counts[failure.kind], batch_size, failure.kind, self.failure_reward,
                failure_message(self.fn_label, sample, failure), failure.kind,
            )
