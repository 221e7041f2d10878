"""The parallel reward manager: a pool of worker processes with a timeout on every call.

Why our own small pool rather than `concurrent.futures.ProcessPoolExecutor`: the executor cannot
kill one worker stuck in a hanging call (it only offers shutting the whole pool down, and even that
waits for running calls), and a timeout on ``future.result`` would count the time a call spent
queued. Here each worker owns a pipe and runs one call at a time, so the parent knows when each call
started, kills exactly the worker whose call ran past ``timeout_s``, and starts a replacement.

Workers are started with 'forkserver' (or 'spawn' where it is missing), never 'fork': forking a
process that holds torch's thread pools can deadlock. Each start costs about a second on 2 CPU cores
(the child re-imports the parent's ``__main__`` module), paid once per worker when the manager is
built and again after each timeout; a worker's first call is timed only once it reports ready, so a
slow start never counts as a timeout.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import time
from collections import deque
from typing import Any, Callable

from posttrain.errors import ConfigError, RewardFunctionError
from posttrain.rewards.evaluate import Failure, FailurePolicy, SampleResult, evaluate_one, label_of
from posttrain.rewards.types import RewardInput, RewardOutput


def _worker_main(conn: multiprocessing.connection.Connection, fn: Callable[..., Any]) -> None:
    """Worker loop: load the function, say ready, then score one sample per message until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is handled by the parent, which kills us
    try:
        resolve = getattr(fn, "resolve", None)
        if resolve is not None:
            resolve()  # import the user's file now, so the first call's timeout covers only the call
    except BaseException as exc:  # report any import failure to the parent instead of dying mutely
        conn.send(("load_error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        task_id, sample = message
        conn.send(("result", (task_id, evaluate_one(fn, sample))))


class _Worker:
    """One worker process, its pipe, and the call it is running (if any)."""

    def __init__(self, ctx: Any, fn: Callable[..., Any]):
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child_conn, fn), daemon=True, name="posttrain-reward")
        self.process.start()
        child_conn.close()
        self.started_at = time.monotonic()
        self.ready = False
        self.task: tuple[int, int] | None = None  # (batch number, sample position)
        self.deadline = math.inf

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class ParallelRewardManager:
    """Scores samples in ``num_workers`` processes; a call running past ``timeout_s`` is a failure.

    ``fn`` must be picklable: a `RewardFunction` from `load_reward_function` (which ships only its
    path and name) or a module-level function. Failures follow ``on_error`` as in the naive manager;
    with ``on_error="raise"`` the first failure stops the batch at once (a hanging function is not
    waited out sample by sample). Call `close` (or use ``with``) to stop the workers.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        num_workers: int = 2,
        timeout_s: float = 60.0,
        on_error: str = "raise",
        failure_reward: float = 0.0,
        start_method: str | None = None,
        startup_timeout_s: float = 120.0,
    ):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ConfigError(f"reward.num_workers: must be an integer >= 1, got {num_workers!r}")
        if not timeout_s > 0:
            raise ConfigError(f"reward.timeout_s: must be > 0 seconds, got {timeout_s!r}")
        try:
            pickle.dumps(fn)
        except Exception as exc:
            raise TypeError(
                f"the parallel reward manager sends the function to worker processes, but {label_of(fn)} "
                f"cannot be pickled ({exc}); pass load_reward_function(...) or a module-level function"
            ) from exc
        self.fn = fn
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = startup_timeout_s
        self.policy = FailurePolicy(label_of(fn), on_error, failure_reward)
        methods = multiprocessing.get_all_start_methods()
        self._ctx = multiprocessing.get_context(start_method or ("forkserver" if "forkserver" in methods else "spawn"))
        self._batch = 0
        self._workers: list[_Worker] = []
        self._start_workers()  # start now: their start-up overlaps whatever the caller does next

    def score(self, samples: list[RewardInput]) -> RewardOutput:
        """Score a batch; the output keeps the order of ``samples``."""
        if not self._workers:
            self._start_workers()
        self._batch += 1
        try:
            results = self._run(samples)
        except BaseException:
            self.close()  # busy workers hold calls from this batch; never let them leak into the next
            raise
        return self.policy.finish(samples, results)

    def close(self) -> None:
        """Stop every worker (politely, then by force). `score` starts fresh ones if called again."""
        workers, self._workers = self._workers, []
        for worker in workers:
            if worker.task is None and worker.ready:
                try:
                    worker.conn.send(None)
                    worker.process.join(timeout=1)
                except OSError:
                    pass
            worker.kill()

    def __enter__(self) -> "ParallelRewardManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass  # interpreter shutdown: the daemon workers die with us anyway

    def _start_workers(self) -> None:
        self._workers = [_Worker(self._ctx, self.fn) for _ in range(self.num_workers)]

    def _run(self, samples: list[RewardInput]) -> list[SampleResult]:
        """Hand samples to idle workers, collect results, and replace workers that time out."""
        results: list[SampleResult | None] = [None] * len(samples)
        todo = deque(range(len(samples)))
        while todo or any(w.task is not None for w in self._workers):
            for worker in self._workers:
                if worker.ready and worker.task is None and todo:
                    position = todo.popleft()
                    worker.conn.send(((self._batch, position), samples[position]))
                    worker.task, worker.deadline = (self._batch, position), time.monotonic() + self.timeout_s
            self._wait_and_collect(results, samples)
            self._expire(results, samples)
        return results  # type: ignore[return-value]  # every slot is filled when the loop ends

    def _wait_and_collect(self, results: list[SampleResult | None], samples: list[RewardInput]) -> None:
        """Block until a worker answers or the nearest deadline passes; record what arrived."""
        waiting = [w for w in self._workers if w.task is not None or not w.ready]
        now = time.monotonic()
        deadlines = [w.deadline if w.ready else w.started_at + self.startup_timeout_s for w in waiting]
        ready_conns = multiprocessing.connection.wait([w.conn for w in waiting], timeout=max(0.0, min(deadlines) - now))
        for worker in [w for w in waiting if w.conn in ready_conns]:
            try:
                kind, payload = worker.conn.recv()
            except (EOFError, OSError):
                self._crashed(worker, results, samples)
                continue
            if kind == "ready":
                worker.ready = True
            elif kind == "load_error":
                raise RewardFunctionError(
                    f"loading reward function {self.policy.fn_label} in a worker process failed: {payload}"
                )
            elif worker.task == payload[0]:  # a (batch, position) id; stale answers are dropped
                self._record(results, samples, payload[0][1], payload[1])
                worker.task, worker.deadline = None, math.inf

    def _expire(self, results: list[SampleResult | None], samples: list[RewardInput]) -> None:
        """Kill and replace each worker whose call or start-up ran past its deadline."""
        now = time.monotonic()
        for i, worker in enumerate(self._workers):
            if not worker.ready and now - worker.started_at > self.startup_timeout_s:
                raise RewardFunctionError(
                    f"a reward worker process did not load {self.policy.fn_label} within {self.startup_timeout_s:g} s"
                )
            if worker.task is not None and now >= worker.deadline:
                detail = f"did not return within {self.timeout_s:g} s (its worker process was killed and replaced)"
                worker.kill()
                self._workers[i] = _Worker(self._ctx, self.fn)
                self._record(results, samples, worker.task[1], SampleResult(failure=Failure("timeout", detail)))

    def _crashed(self, worker: _Worker, results: list[SampleResult | None], samples: list[RewardInput]) -> None:
        """A worker's pipe closed: its process died (os._exit, a segfault, the OOM killer)."""
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        if worker.task is None:
            raise RewardFunctionError(
                f"a reward worker process exited (code {code}) while loading {self.policy.fn_label}"
            )
        worker.kill()
        self._workers[self._workers.index(worker)] = _Worker(self._ctx, self.fn)
        failure = Failure("crashed", f"crashed its worker process (exit code {code})")
        self._record(results, samples, worker.task[1], SampleResult(failure=failure))

    def _record(
        self, results: list[SampleResult | None], samples: list[RewardInput], position: int, result: SampleResult
    ) -> None:
        """Store one result; a failure that must raise ends the batch right here, not after the rest."""
        results[position] = result
        if result.failure is not None and self.policy.must_raise(result.failure):
            raise self.policy.error(samples[position], result.failure)
