"""A time limit on one reward call made in this process (the naive manager's ``reward.timeout_s``).

The parallel manager bounds a call by killing the worker process that runs it; the naive manager
runs the call in the trainer's own process, so it has to interrupt the call instead. `Deadline.run`
raises `CallTimedOut` *inside* the running function once its time is up, which unwinds the
function (its ``finally`` blocks run) back to the manager. Two mechanisms, picked per call:

- **On the main thread** (the trainer, or each worker process a launcher starts): a one-shot
  ``SIGALRM`` from ``setitimer``. Its Python handler raises at the next bytecode, and a blocking
  system call the function waits in (``time.sleep``, a socket read, ``select``) is interrupted too.
  Used only while no other code has a real-time timer running or its own ``SIGALRM`` handler set;
  the handler stays installed (doing nothing between calls) until the last `Deadline` is closed, so
  a signal that lands just as a call ends is never handed to the default action, which ends the
  process.
- **On any other thread**, or when ``SIGALRM`` is taken: one watchdog thread per `Deadline` that,
  at the deadline, schedules `CallTimedOut` in the calling thread with CPython's
  ``PyThreadState_SetAsyncExc``. It takes effect at the next bytecode the thread runs.

What neither can interrupt: a C call that never returns (a C extension's loop, a catastrophic regular
expression inside ``re``; off the main thread also ``time.sleep`` and blocking I/O) — the exception
waits until the call comes back to Python. A function that catches `BaseException` (a bare
``except:``) and carries on swallows the one interruption each call gets. For code that can hang
in C, use ``reward.reward_manager: parallel``, whose worker processes are killed.

Cost when nothing hangs: two ``setitimer`` calls per reward call on the main thread, a lock and a
notify per call elsewhere; no thread or process is started per call.
"""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class CallTimedOut(BaseException):
    """Raised inside a call that ran past its deadline.

    A `BaseException`, not an `Exception`: a reward function's own ``except Exception`` must not
    swallow it and carry on with the hang."""


class _AlarmState:
    """The process's one SIGALRM handler, shared by every `Deadline` on the main thread."""

    armed = False  # whether an alarm now belongs to a running call
    users = 0  # open Deadlines that rely on the handler; the previous one is restored at 0
    previous: Any = None


def _on_alarm(signum: int, frame: Any) -> None:
    if _AlarmState.armed:  # an alarm arriving after its call ended is dropped
        _AlarmState.armed = False
        raise CallTimedOut()


class Deadline:
    """Runs calls with a time limit; one per manager, reused for every call. Call `close` at the end."""

    def __init__(self) -> None:
        self._uses_alarm = False
        self._watchdog: _Watchdog | None = None

    def run(self, call: Callable[[], T], seconds: float) -> T:
        """``call()``, or `CallTimedOut` raised inside it once ``seconds`` have passed."""
        if self._alarm_usable():
            return _run_with_alarm(call, seconds)
        if self._watchdog is None:
            self._watchdog = _Watchdog()
        return self._watchdog.run(call, seconds)

    def close(self) -> None:
        """Stop the watchdog thread; the last Deadline closed gives SIGALRM back to its old handler."""
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
        if self._uses_alarm:
            self._uses_alarm = False
            _AlarmState.users -= 1
            main = threading.current_thread() is threading.main_thread()
            if _AlarmState.users == 0 and main and signal.getsignal(signal.SIGALRM) is _on_alarm:
                signal.signal(signal.SIGALRM, _AlarmState.previous)

    def _alarm_usable(self) -> bool:
        """On the main thread, with SIGALRM either ours or at its default and no timer running."""
        if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
            return False  # someone else's timer: ours would replace it
        handler = signal.getsignal(signal.SIGALRM)
        if handler is not _on_alarm:
            if handler not in (signal.SIG_DFL, None):
                return False  # another library handles SIGALRM
            _AlarmState.previous = handler
            signal.signal(signal.SIGALRM, _on_alarm)
        if not self._uses_alarm:
            self._uses_alarm = True
            _AlarmState.users += 1
        return True


def _run_with_alarm(call: Callable[[], T], seconds: float) -> T:
    # The alarm is one-shot, and every place it can raise lies inside the outer try: inside the
    # call, or in the inner finally before `armed` is cleared. So it never escapes to the caller.
    try:
        try:
            _AlarmState.armed = True
            signal.setitimer(signal.ITIMER_REAL, seconds)
            return call()
        finally:
            _AlarmState.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except CallTimedOut:
        _AlarmState.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        raise


class _Watchdog:
    """A daemon thread that raises `CallTimedOut` in a calling thread whose call ran out of time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._target: tuple[int, float] | None = None  # (thread id, monotonic deadline) of the running call
        self._fired = False
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="posttrain-reward-deadline", daemon=True)
        self._thread.start()

    def run(self, call: Callable[[], T], seconds: float) -> T:
        # One injection per call, and the pending one is cleared under the lock in `_disarm`: it is
        # raised inside the call, inside `_disarm` (caught by the outer except), or never.
        try:
            try:
                with self._cond:
                    self._target, self._fired = (threading.get_ident(), time.monotonic() + seconds), False
                    self._cond.notify()
                return call()
            finally:
                self._disarm()
        except CallTimedOut:
            self._disarm()
            raise

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _disarm(self) -> None:
        with self._cond:
            target, self._target = self._target, None
            if self._fired and target is not None:
                _set_async_exc(target[0], None)  # drop an injection the thread has not raised yet

    def _loop(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._target is None or self._fired:
                    self._cond.wait()
                    continue
                left = self._target[1] - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._fired = True
                _set_async_exc(self._target[0], CallTimedOut)


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    """Schedule ``exc`` in the thread (None clears a scheduled one); CPython's documented C API."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)
