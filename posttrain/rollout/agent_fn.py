"""A user's agent function run as RL episodes (`rollout.agent.function`, docs/agentic.md "Agent functions").

The function is the user's own agent code::

    async def run(base_url: str, row: dict) -> float | dict:   # or a plain def
        client = openai.AsyncOpenAI(base_url=base_url, api_key="none")
        ...any number of client.chat.completions.create(model="policy", messages=...) calls...
        return 1.0 if solved else 0.0                           # or {"reward": 1.0, "tool_calls": 3.0}

Each task row of a step is given to it `rollout.n` times (one episode each) with a base URL of
its own on the stage's loopback endpoint (posttrain.rollout.agent_endpoint), which records every
call. `run_agent_episodes` runs up to `max_concurrency` episodes at once on one asyncio loop (a
plain function in a thread of its own), each at most `timeout` seconds. An episode fails when the
function raises, times out, returns something else than a finite number or a dict holding one under
"reward" (its other entries numbers: metrics), or made no call; the failure is logged naming the
function, the row and the sample, and the episode is dropped or, with a `failure_penalty`, its
recorded calls train with that reward. More failed episodes in one step than `max_failure_rate`
of them stop the run with one `AgentError` carrying the first message. A hung plain function's
thread cannot be stopped: it is left behind (its URL is closed, so its later calls fail fast).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.errors import ConfigError, UserError
from posttrain.files import import_user_module
from posttrain.rollout.agent_endpoint import AgentEndpoint, EpisodeRecord

log = logging.getLogger(__name__)


class AgentError(UserError):
    """Too many episodes of one step failed (the first failure's message, the count and the fix)."""


class AgentFailure(Exception):
    """One episode failed; `str(self)` names the function, the row and the sample, and how."""


@dataclass(frozen=True)
class AgentTask:
    """One episode to run: a task row and which of its `rollout.n` samples this is."""

    group: str  # the row's uid this step: the episodes of one row form one GRPO group
    sample: int
    row: dict[str, Any]  # the data file's row, every column
    index: int  # the row's index in the data files (for messages)


@dataclass(frozen=True)
class AgentLimits:
    """How episodes run and what a failure costs (`rollout.agent.*`)."""

    max_concurrency: int = 8
    timeout: float | None = None  # seconds per episode; None: no limit
    failure_penalty: float | None = None  # None: a failed episode is dropped; else its calls' reward
    max_failure_rate: float = 0.0


@dataclass
class AgentEpisode:
    """One episode's outcome: its recorded calls, reward and metrics, or why it failed."""

    task: AgentTask
    record: EpisodeRecord
    reward: float | None = None  # None: dropped (failed without a penalty, or failed with no call)
    metrics: dict[str, float] = field(default_factory=dict)
    failed: str | None = None


def load_agent_function(spec: str, key: str, kwargs: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The callable named by ``module:function`` or ``path/to/file.py:function``, with `kwargs`
    (rollout.agent.kwargs) bound: each episode calls it as ``function(base_url, row, **kwargs)``."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(f"{key}: expected 'module:function' or 'path/to/file.py:function', got {spec!r}")
    module = import_user_module(where, "agent", lambda m: ConfigError(f"{key}: {m}"))
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__)
        raise ConfigError(f"{key}: {where} defines no function {name!r}; its functions are {found}")
    kwargs = dict(kwargs or {})
    try:
        inspect.signature(fn).bind("http://127.0.0.1/v1", {}, **kwargs)
    except TypeError as e:
        taken = f" and the keyword arguments {sorted(kwargs)} (rollout.agent.kwargs)" if kwargs else ""
        raise ConfigError(f"{key}: {spec} must take (base_url, row){taken}: {e}") from None
    return functools.partial(fn, **kwargs) if kwargs else fn


def check_result(value: Any) -> tuple[float, dict[str, float]]:
    """(reward, metrics) of what an agent function returned; ValueError says what is wrong.

    >>> check_result(1), check_result({"reward": 0.5, "calls": 2})
    ((1.0, {}), (0.5, {'calls': 2.0}))
    """
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if number(value):
        return float(value), {}
    if isinstance(value, dict) and number(value.get("reward")):
        bad = sorted(str(k) for k, v in value.items() if not number(v))
        if bad:
            raise ValueError(f"returned a dict whose entries {bad} are not finite numbers (every entry besides reward is a metric)")
        return float(value["reward"]), {str(k): float(v) for k, v in value.items() if k != "reward"}
    shown = repr(value) if len(repr(value)) < 80 else f"a {type(value).__name__}"
    raise ValueError(f"returned {shown}; expected a finite number (the reward) or a dict with a finite 'reward'")


def run_agent_episodes(fn: Callable[..., Any], name: str, tasks: list[AgentTask], endpoint: AgentEndpoint,
                       limits: AgentLimits, prefix: str) -> list[AgentEpisode]:
    """Run every task's episode (see the module docstring); episodes in the order of `tasks`.
    `name` is how messages name the function; `prefix` makes episode ids unique to the step."""
    return asyncio.run(_run_all(fn, name, tasks, endpoint, limits, prefix))


async def _run_all(fn: Callable[..., Any], name: str, tasks: list[AgentTask], endpoint: AgentEndpoint,
                   limits: AgentLimits, prefix: str) -> list[AgentEpisode]:
    gate = asyncio.Semaphore(limits.max_concurrency)

    async def one(i: int, task: AgentTask) -> AgentEpisode:
        async with gate:
            return await _episode(fn, name, task, endpoint, limits, f"{prefix}-{i}")

    episodes = await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
    failures = [e.failed for e in episodes if e.failed is not None]
    if len(failures) > limits.max_failure_rate * len(episodes):
        raise AgentError(f"{failures[0]} ({len(failures)} of {len(episodes)} episodes of this step failed, more than "
                         f"rollout.agent.max_failure_rate {limits.max_failure_rate:g} allows; fix the agent function or raise "
                         "rollout.agent.max_failure_rate)")
    for message in failures:
        log.warning("%s", message)
    return list(episodes)


async def _episode(fn: Callable[..., Any], name: str, task: AgentTask, endpoint: AgentEndpoint,
                   limits: AgentLimits, eid: str) -> AgentEpisode:
    record = endpoint.open(eid)
    head = f"agent function {name} (row {task.index}, sample {task.sample})"
    try:
        call = fn(endpoint.base_url(eid), task.row) if inspect.iscoroutinefunction(fn) else _in_thread(fn, endpoint.base_url(eid), task.row)
        value = await asyncio.wait_for(call, limits.timeout)
        reward, metrics = check_result(value)
        if not record.calls:
            raise AgentFailure(f"{head}: made no chat-completion call at its base URL, so there is nothing to train on")
        return AgentEpisode(task, record, reward, metrics)
    except asyncio.TimeoutError:
        why = f"{head}: took longer than rollout.agent.timeout ({limits.timeout:g} s); the episode was abandoned"
    except AgentFailure as e:
        why = str(e)
    except ValueError as e:  # check_result's
        why = f"{head}: {e}"
    except Exception as e:  # the user's code: any exception ends this episode, not the run
        why = f"{head}: raised {type(e).__name__}: {e}"
    finally:
        endpoint.close(eid)
    if record.refused:
        why += f" (the endpoint refused a call: {record.refused[-1]})"
    kept = limits.failure_penalty is not None and bool(record.calls)
    fate = f"its {len(record.calls)} call(s) trained with reward {limits.failure_penalty:g}" if kept else "episode dropped"
    return AgentEpisode(task, record, limits.failure_penalty if kept else None, {}, f"{why}: {fate}")


def _in_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future:
    """A plain function's result as a future of the running loop, computed in a daemon thread (the
    loop's default executor would be joined when the loop closes, waiting on a hung agent)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if not future.done():  # cancelled by the timeout: nobody waits any more
            future.set_exception(error) if error is not None else future.set_result(value)

    def run() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as e:  # handed to the loop's thread
            value, error = None, e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop has closed: an abandoned episode
            pass

    threading.Thread(target=run, name="agent episode", daemon=True).start()
    return future
