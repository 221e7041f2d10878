"""One run per run directory: the process the user started holds a lock on the directory while it runs.

Two `posttrain train` commands on one run directory would interleave their checkpoints, metrics and
markers; the second one is refused at once, with the directory and the process holding it named.

How (POSIX, Linux and macOS): `<run dir>/.posttrain.lock` is locked with `flock` and holds a JSON
record of the holder (pid, host, start time, command line) for the refusal message. The kernel
drops an flock when its holder dies, however it dies (SIGKILL, OOM killer, power loss of a client
on a network file system), so a stale lock needs no timeout: a lock file whose lock is free is a
leftover, taken over with one line saying whose it was. The file is removed on a clean exit.

Worker processes of the same run: while a process holds the lock, `HOLDER_ENV` in its environment
names it (`<host>:<pid>`), so every process it starts (subprocess, multiprocessing, torchrun)
inherits the name. `hold_run_lock` in a process whose `HOLDER_ENV` names the current holder of that
directory's lock returns without locking: the launcher holds the lock for the whole run, its
workers are let in, and any other process is refused. (A worker whose launcher died finds the lock
free and takes it, as any new run would.) Nested calls in one process are let in the same way.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from posttrain.errors import UserError

LOCK_FILE = ".posttrain.lock"
HOLDER_ENV = "POSTTRAIN_RUN_LOCK_HOLDER"


class RunDirInUse(UserError):
    """Another process is running on this run directory."""


@dataclass(frozen=True)
class _Lock:
    fd: int
    path: Path


def _token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _record() -> str:
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return json.dumps({"holder": _token(), "pid": os.getpid(), "host": socket.gethostname(),
                       "started": now, "command": " ".join(sys.argv)})


def _read_record(fd: int) -> dict:
    """The holder's record; `{}` while the holder is between locking and writing it, or if garbled."""
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 65536).decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _describe(record: dict) -> str:
    if not record:
        return "a process that has not yet written its name into the lock file"
    text = f"process {record.get('pid', '?')} on {record.get('host', '?')}, started {record.get('started', '?')}"
    return text + (f" ({record['command']})" if record.get("command") else "")


def _try_lock(path: Path) -> tuple[int, bool]:
    """Open the lock file and try to lock it without waiting: (fd, locked). Retries when the file
    was replaced between open and lock (a holder releasing it unlinks it)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            return fd, False
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, True
        os.close(fd)  # locked a file its holder had just unlinked: lock the current one


def _holder_record(fd: int) -> dict:
    """The record of the process holding the lock; waits briefly for a holder that has just locked."""
    for _ in range(20):
        record = _read_record(fd)
        if record:
            return record
        time.sleep(0.05)
    return {}


def _acquire(run_dir: Path) -> _Lock | None:
    """Lock `run_dir`, or None when this process is the holder or one of its workers."""
    path = run_dir / LOCK_FILE
    fd, locked = _try_lock(path)
    if not locked:
        record = _holder_record(fd)
        os.close(fd)
        if record.get("holder") and record.get("holder") == os.environ.get(HOLDER_ENV):
            return None  # the launcher of this process holds it
        raise RunDirInUse(
            f"{run_dir} is in use by another run: {_describe(record)}; wait for it to end or stop it, "
            "or give this run its own directory (trainer.default_local_dir or trainer.experiment_name)"
        )
    stale = _read_record(fd)
    if stale:
        print(f"posttrain: taking over the lock of {run_dir} left by {_describe(stale)}, which is no longer running", flush=True)
    os.ftruncate(fd, 0)
    os.pwrite(fd, _record().encode("utf-8"), 0)
    os.fsync(fd)
    return _Lock(fd, path)


@contextmanager
def hold_run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the lock of `run_dir` (created if missing) for the body; raises `RunDirInUse` when
    another run holds it. See the module docstring for workers and stale locks."""
    run_dir = Path(run_dir).expanduser().absolute()
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = _acquire(run_dir)
    if lock is None:
        yield
        return
    before = os.environ.get(HOLDER_ENV)
    os.environ[HOLDER_ENV] = _token()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HOLDER_ENV, None)
        else:
            os.environ[HOLDER_ENV] = before
        lock.path.unlink(missing_ok=True)  # unlinked while still locked: see `_try_lock`
        os.close(lock.fd)
        if created and not any(run_dir.iterdir()):
            run_dir.rmdir()  # a run refused before writing anything leaves no empty directory
