"""A fork server: one process that has imported torch, transformers and posttrain once, and forks
each worker process of a launch from that state (`python -m posttrain.cluster.forkserver FD MODULES`).

Why: a fresh `python -m posttrain` spends ~5 CPU-seconds importing torch and transformers' model
classes before it reads its config; a forked copy of a process that has already imported them
starts at once. The client side (which launches use it, and the Popen-like handle the launcher
watches) is posttrain.cluster.process_start.

What keeps a fork safe here:
- The server runs no torch operation, starts no thread and initialises no GPU: libgomp's thread
  pool and CUDA do not survive a fork, and a fork of a multi-threaded process can inherit a lock
  held by a thread that does not exist in the child. Before each fork the server checks that it
  runs no Python thread, no native thread beyond those of libraries that handle a fork themselves
  (OpenBLAS, jemalloc: `_fork_aware_pools`) and no CUDA; if it does, it says so and exits, and the
  client starts plain processes from then on.
- Each child then becomes what `python -m posttrain ARGS` would have been: the launcher's working
  directory, environment and standard streams (sent as file descriptors), default signal handlers,
  `sys.argv`, its share of the CPU threads (`torch.set_num_threads`, since libgomp read
  `OMP_NUM_THREADS` when the server loaded it), and the interpreter's exit sequence (non-daemon
  threads joined, `atexit` handlers run, streams flushed) before its exit status.
- The server is the children's parent: it reaps them and sends each exit status to the client, and
  it sends signals on the client's behalf only to children it has not yet reaped (no pid reuse).

Protocol: one AF_UNIX SOCK_SEQPACKET socket; each message is one JSON object. Client -> server:
`{"op": "start", "module", "argv", "env", "cwd", "threads"}` with 3 file descriptors (stdin,
stdout, stderr of the child), or `{"op": "signal", "pid", "sig"}`. Server -> client: `{"op":
"ready"}` once, `{"op": "started", "pid"}` per start, `{"op": "exit", "pid", "code"}` (negative:
killed by that signal, as subprocess reports it), `{"op": "refused", "why"}`. The server exits when
the client closes its end; children still running carry on (as `subprocess` children do when
their launcher dies).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback
from typing import Any

MAX_MESSAGE = 1 << 20  # an environment of a few hundred variables is tens of KiB


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the file descriptors sent with it; (None, []) when the other end closed."""
    data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, max_fds)
    return (json.loads(data) if data else None), fds


def thread_count() -> int:
    """This process's threads as the kernel counts them (native threads included), else Python's."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def serve(sock: socket.socket, preload: list[str]) -> None:
    pools = _fork_aware_pools()
    for name in preload:
        importlib.import_module(name)
    unsafe = _unsafe_to_fork(pools)
    if unsafe:
        send(sock, {"op": "refused", "why": f"the fork server {unsafe} after importing {', '.join(preload)}"})
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # SIGCHLD wakes the select below
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle; it stops the children
    live: set[int] = set()
    send(sock, {"op": "ready"})
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 512)
        _reap(sock, live)
        if sock not in readable:
            continue
        message, fds = receive(sock, max_fds=3)
        if message is None:
            return  # the client is gone
        if message["op"] == "start":
            unsafe = _unsafe_to_fork(pools)
            if unsafe:
                send(sock, {"op": "refused", "why": f"the fork server {unsafe}"})
                return
            pid = os.fork()
            if pid == 0:
                _child(message, fds, [sock.fileno(), wake_r, wake_w])  # never returns
            for fd in fds:
                os.close(fd)
            live.add(pid)
            send(sock, {"op": "started", "pid": pid})
        elif message["op"] == "signal" and message["pid"] in live:
            os.kill(message["pid"], message["sig"])


def _fork_aware_pools() -> int:
    """Import the libraries that start threads of their own when loaded, each of which handles a fork
    itself, and return the process's thread count after that: numpy's and scipy's OpenBLAS (a pool
    each, stopped before a fork and restarted when needed: pthread_atfork) and pyarrow's jemalloc
    (a background thread, restarted in the child by jemalloc's own fork handlers)."""
    for name in ("numpy", "scipy.linalg", "pyarrow.dataset"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    return thread_count()


def _unsafe_to_fork(pools: int) -> str | None:
    """Why forking this process now would not be safe, or None: a Python thread, another native thread
    than those of `_fork_aware_pools` (torch's OpenMP pool: a torch operation ran), or an initialised GPU."""
    if threading.active_count() != 1:
        return f"runs {threading.active_count()} Python threads"
    if thread_count() > pools:  # fewer after a fork: OpenBLAS stopped its pool
        return f"has {thread_count()} threads where the fork-aware libraries account for {pools}"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "has initialised CUDA"
    return None


def _reap(sock: socket.socket, live: set[int]) -> None:
    while live:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        live.discard(pid)
        send(sock, {"op": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})


def _child(message: dict[str, Any], fds: list[int], server_fds: list[int]) -> None:
    """Become `python -m MODULE ARGV` in the launcher's place, run it, and exit with its status."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
        for fd in server_fds:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(message["env"])
        _like_a_fresh_interpreter(message)
        code = _run_module(message["module"], message["argv"])
    except BaseException:  # noqa: BLE001 -- whatever happens, this process must not return into the server's loop
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 -- a closed pipe: nothing more can be said
                pass
        os._exit(code)


def _like_a_fresh_interpreter(message: dict[str, Any]) -> None:
    """What `python -m` would have set up differently in the child: the module search path starts at
    the working directory, `sys.argv`, line buffering when a stream is a terminal, and the number of
    threads torch computes on."""
    import torch  # imported already (the server's preload): free

    sys.path[0] = os.getcwd()
    spec = importlib.util.find_spec(message["module"] + ".__main__")
    sys.argv = [spec.origin if spec else message["module"], *message["argv"]]
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdout.reconfigure(line_buffering=os.isatty(1), write_through=unbuffered)
    sys.stderr.reconfigure(line_buffering=True, write_through=unbuffered)  # stderr is line-buffered since Python 3.9
    if message.get("threads"):
        torch.set_num_threads(int(message["threads"]))


def _run_module(module: str, argv: list[str]) -> int:
    """Run `module.__main__` as the interpreter runs `python -m module`, then its exit sequence."""
    import runpy

    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code: Any = 0
    except SystemExit as exit_:
        code = exit_.code
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 -- reported as the interpreter reports an uncaught exception
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # join non-daemon threads, as interpreter exit does
    atexit._run_exitfuncs()
    if code == -signal.SIGINT:  # a KeyboardInterrupt ends an interpreter as killed by SIGINT
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])), [m for m in sys.argv[2].split(",") if m])
