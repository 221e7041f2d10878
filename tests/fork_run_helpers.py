"""`posttrain ARGS` in a process of its own that skips a fresh interpreter's imports (a module name no
other test folder uses).

For the tests whose point is what only a separate process shows: its exit status when the test hook
SIGKILLs it, a reward function that hangs (bounded by `timeout`, where an in-process run would hang
the test session) or calls `sys.exit`. The process is forked from posttrain's fork server
(posttrain.cluster.process_start, as a run's CPU workers are), which imported torch and transformers
once for the whole test session: ~0.1 s a start where `python -m posttrain` spends 5-10 s of CPU on
imports. Where the platform cannot fork from a server, it is a plain `python -m posttrain`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Any

from posttrain.cluster.process_start import start_process


def posttrain_forked(*args: str, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m posttrain ARGS` in `cwd` with this environment plus `env`, as a process of its own on
    the CPU; its exit status (negative: the signal that ended it) and output as text. A process still
    running after `timeout` seconds is killed and fails the test."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = start_forked(*args, cwd=cwd, env=env, stdout=out, stderr=err)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(list(args), code, out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def start_forked(*args: str, cwd: Path, env: dict[str, str] | None, stdout: IO | None, stderr: IO | None) -> Any:
    """The process of `python -m posttrain ARGS` (as posttrain_forked runs it), started and not waited
    for: a handle like a Popen's (pid, poll, wait, send_signal, returncode). `stdout` and `stderr` are
    files (anything with a `fileno`)."""
    here = os.getcwd()
    os.chdir(cwd)  # the server forks the process in this process's working directory
    try:
        return start_process(list(args), dict(os.environ, **(env or {})), stdout, stderr, device="cpu")
    finally:
        os.chdir(here)
