"""Starting one process of a launch (a worker rank, the explorer or trainer of a decoupled run): the one
place that chooses between a fork of posttrain's fork server and a plain `python -m posttrain`.

A process forked from the fork server (posttrain.cluster.forkserver) skips the ~5 CPU-seconds a
fresh interpreter spends importing torch and transformers. The server is started once per launching
process, on the first launch that can use it, and serves every later launch of that process whose
environment it was started with (a test session's in-process runs share one). It is used when:
- the process computes on the CPU: a GPU process is always a fresh interpreter, so no CUDA state
  can ever cross a fork;
- the command has no prefix (`nsys profile ...` must start the program itself);
- `POSTTRAIN_FORK_SERVER` is not `0` (set it to `0` to start plain processes), and the platform
  can fork and pass file descriptors (Linux);
- the server could start and found itself single-threaded after its imports.
Otherwise, or if the server fails, the process starts as `python -m posttrain ...` (subprocess), as
before. Both kinds of handle answer what the launcher's `watch` asks: pid, poll, returncode
(negative: killed by that signal), wait, send_signal, kill.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import IO, Any

from posttrain.cluster import RANK_ENV, WORLD_ENV
from posttrain.cluster.forkserver import receive, send

FORK_ENV = "POSTTRAIN_FORK_SERVER"
ENTRY = "posttrain"  # the processes run `python -m posttrain ARGV`
# Imported by the server once: what a `posttrain train` worker of the tiny Qwen2 model imports before
# its first step (measured with `python -X importtime`), the command line's modules first (they set
# the process-wide settings of posttrain.runtime before torch loads).
PRELOAD = ["posttrain.cli", "posttrain.cli.train", "posttrain.cli.config_cmd", "posttrain.cli.eval_cmd",
           "posttrain.trainer.run", "posttrain.trainer.rl", "posttrain.trainer.decoupled", "posttrain.cluster.launch",
           "posttrain.data.loader", "pyarrow.dataset", "pandas", "transformers.masking_utils", "transformers.modeling_layers",
           "transformers.processing_utils", "transformers.models.qwen2.modeling_qwen2"]
# Variables that may differ between the server and a process it forks, because they are read only
# at run time: those the launcher sets per process (posttrain.cluster.launch.worker_env; the thread
# count is applied with torch.set_num_threads), the run lock's holder (posttrain.runlock), the
# checkpoint test hook (posttrain.checkpoint.manager), and the name pytest gives the current test.
# Any other difference (HF_HOME, CUDA_VISIBLE_DEVICES, ...: read when a library is imported) starts
# a new server with the new environment.
RUNTIME_ENV = {RANK_ENV, WORLD_ENV, "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "POSTTRAIN_DEVICE", "OMP_NUM_THREADS",
               "POSTTRAIN_RUN_LOCK_HOLDER", "POSTTRAIN_TEST_KILL", "PYTEST_CURRENT_TEST"}

logger = logging.getLogger(__name__)


def start_process(argv: list[str], env: dict[str, str], stdout: IO | None, stderr: IO | None, *,
                  device: str | None = None, prefix: list[str] | None = None, runtime_env: tuple[str, ...] = ()) -> Any:
    """`[*prefix, python, -m, posttrain, *argv]` with `env`, its output to `stdout`/`stderr` (None: this
    process's own), forked from the fork server where it can be (see the module docstring). `device`
    is where it computes (None: on the GPU when one is visible); `runtime_env` names more variables
    this launch sets per process."""
    command = [*(prefix or []), sys.executable, "-m", ENTRY, *argv]
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not prefix and device == "cpu" and _can_fork():
        server = server_for(env, set(runtime_env))
        if server is not None:
            try:
                return server.start(command, argv, env, stdout, stderr)
            except OSError as err:  # the server died: this and later starts are plain processes
                _refuse(f"the fork server failed ({err})")
    return plain_process(command, env, stdout, stderr)


def plain_process(command: list[str], env: dict[str, str], stdout: IO | None, stderr: IO | None) -> subprocess.Popen:
    return subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr)


class ForkedProcess:
    """A process the fork server forked, watched through the server (its parent) like a Popen."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]):
        self.server, self.pid, self.args = server, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.pump(0)
            if self.server.gone and self.pid not in self.server.exits and not _exists(self.pid):
                self.server.exits[self.pid] = 1  # its status went with the server
            self.returncode = self.server.exits.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.server.pump(min(left, 1.0) if left is not None else 1.0)
            if self.server.gone:
                time.sleep(0.1)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            self.server.signal(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The client's end of one fork server (started here with `env`, importing `preload`): its process,
    its socket, the exit statuses it reported. Raises OSError when the server refuses to serve."""

    def __init__(self, env: dict[str, str], preload: list[str] | None = None):
        self.env = env
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "posttrain.cluster.forkserver", str(theirs.fileno()), ",".join(PRELOAD if preload is None else preload)],
            env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.exits: dict[int, int] = {}
        self.started: list[int] = []
        self.gone = False
        reply = self._next("ready", "refused")
        if reply["op"] == "refused":
            self.close()
            raise OSError(reply["why"])

    def start(self, command: list[str], argv: list[str], env: dict[str, str], stdout: IO | None, stderr: IO | None,
              module: str = ENTRY) -> ForkedProcess:
        """Fork `python -m MODULE ARGV` (`command` names it in messages) in this process's working directory."""
        fds = [0, stdout.fileno() if stdout is not None else 1, stderr.fileno() if stderr is not None else 2]
        send(self.sock, {"op": "start", "module": module, "argv": argv, "env": env, "cwd": os.getcwd(),
                         "threads": _threads(env.get("OMP_NUM_THREADS"))}, fds)
        reply = self._next("started", "refused")
        if reply["op"] == "refused":
            raise OSError(reply["why"])
        self.started.append(reply["pid"])
        return ForkedProcess(self, reply["pid"], command)

    def running(self) -> bool:
        """Whether a process this server started has not yet been seen to end."""
        self.pump(0)
        return not self.gone and any(pid not in self.exits for pid in self.started)

    def signal(self, pid: int, sig: int) -> None:
        try:
            send(self.sock, {"op": "signal", "pid": pid, "sig": int(sig)})
        except OSError:
            self._lost()

    def pump(self, timeout: float) -> None:
        """Read the messages that come within `timeout` seconds (0: those already here)."""
        while not self.gone and select.select([self.sock], [], [], timeout)[0]:
            self._dispatch(receive(self.sock)[0])
            timeout = 0

    def _next(self, *ops: str) -> dict[str, Any]:
        """The next message that is one of `ops`, recording exit statuses that come before it."""
        while True:
            message = receive(self.sock)[0]
            if message is None:
                self._lost()
                raise OSError("the fork server exited")
            if message["op"] in ops:
                return message
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any] | None) -> None:
        if message is None:
            self._lost()
        elif message["op"] == "exit":
            self.exits[message["pid"]] = message["code"]

    def _lost(self) -> None:
        """The server is gone, and with it the exit statuses still to come (`ForkedProcess.poll`)."""
        self.gone = True
        _SERVERS.pop(_key(self.env), None)

    def close(self) -> None:
        self.sock.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


_SERVERS: dict[frozenset, ForkServer] = {}
_REFUSED: list[str] = []  # why this process starts plain processes from now on


def _key(env: dict[str, str], runtime: set[str] = frozenset()) -> frozenset:
    return frozenset((k, v) for k, v in env.items() if k not in RUNTIME_ENV and k not in runtime)


def server_for(env: dict[str, str], runtime: set[str]) -> ForkServer | None:
    """The server started with `env` (less its run-time variables); a server of another environment
    is stopped and a new one started."""
    if _REFUSED:
        return None
    key = _key(env, runtime)
    if key not in _SERVERS:
        for old_key, old in list(_SERVERS.items()):
            if not old.running():  # a server whose children still run must stay to report how they end
                old.close()
                _SERVERS.pop(old_key, None)
        try:
            _SERVERS[key] = ForkServer(dict(key))
        except OSError as err:
            _refuse(str(err))
            return None
    return _SERVERS[key]


def _refuse(why: str) -> None:
    _REFUSED.append(why)
    logger.warning("posttrain: starting plain worker processes: %s", why)


def _can_fork() -> bool:
    return os.environ.get(FORK_ENV, "1") != "0" and hasattr(os, "fork") and hasattr(socket, "SOCK_SEQPACKET") \
        and hasattr(socket, "send_fds") and sys.platform.startswith("linux")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _threads(value: str | None) -> int | None:
    """OMP_NUM_THREADS as torch.set_num_threads takes it (its first level when it lists several)."""
    try:
        return int((value or "").split(",")[0])
    except ValueError:
        return None


@atexit.register
def _close_all() -> None:
    for server in list(_SERVERS.values()):
        server.close()
    _SERVERS.clear()
