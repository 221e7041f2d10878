"""A local sandbox for model-written Python: limits on CPU, memory, processes, output and time; no network.

`run_python(code, stdin, limits)` runs ``python -I`` on the code in a fresh temporary directory with
an almost empty environment and returns what it printed and how it ended. What bounds it:

- **CPU time** (``RLIMIT_CPU``) and **wall time** (the process tree is killed after ``wall_s``: a
  sleeping or blocked program uses no CPU);
- **memory** (``RLIMIT_AS``: an allocation past ``memory_mb`` fails with MemoryError);
- **output** (more than ``output_bytes`` on stdout + stderr kills the run) and file size
  (``RLIMIT_FSIZE``);
- **processes**: a fork bomb meets ``processes`` — through a pids cgroup when the process may create
  one (root, here), else ``RLIMIT_NPROC`` (which binds every user but root);
- **network and stray processes**: where unprivileged user namespaces work (`probe`), the code runs
  as PID 1 of its own PID namespace in its own network namespace (``unshare --user --net --pid``),
  which has only a loopback device: no address outside is reachable. The namespace's PID 1 is a
  shell waiting for the code; when it ends, or is killed, the kernel kills every process the code
  started, however it detached.

- **hidden directories**: `run_python(..., hidden=[...])` makes directories invisible to the code (the
  tool-calling code interpreter hides the run directory). With namespaces the code also gets its own
  mount namespace, where an empty tmpfs is mounted over each of them; without, the audit hook refuses
  to open or list anything under them.

Where namespaces are not available, a Python audit hook installed before the code runs refuses to
open sockets, start programs, fork or load C libraries with ctypes. That stops Python code, but
not a C extension that calls the system directly; `probe().isolation` says which of the two a
machine gets ("namespaces" or "audit-hook"), and ``processes`` then relies on the hook and the limits.
"""

from __future__ import annotations

import functools
import os
import resource
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

UNSHARE = ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child")
UNSHARE_MOUNT = ("--mount",)  # added when directories are hidden: their tmpfs stays in the run's namespace
# Run in the sandboxed interpreter before the code when namespaces are missing: a hook that refuses
# network, new programs, forks and ctypes (audit hooks cannot be removed once added).
_AUDIT_PRELUDE = """
import sys
def _posttrain_guard(event, args):
    if event.startswith(("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.system", "ctypes.dlopen", "os.kill")):
        raise PermissionError(f"posttrain sandbox: {event} is not allowed")
sys.addaudithook(_posttrain_guard)
del _posttrain_guard
"""
# Added to the prelude when directories are hidden and namespaces are missing.
_HIDE_PRELUDE = """
import os, sys
def _posttrain_hide(event, args, _hidden=tuple(os.path.realpath(p) for p in {hidden!r})):
    if event in ("open", "os.listdir", "os.scandir", "os.chdir") and args and isinstance(args[0], (str, bytes)):
        path = os.path.realpath(os.fsdecode(args[0]))
        if any(path == h or path.startswith(h + os.sep) for h in _hidden):
            raise PermissionError(f"posttrain sandbox: {{path}} is hidden")
sys.addaudithook(_posttrain_hide)
del _posttrain_hide
"""


@dataclass(frozen=True)
class Limits:
    """What one run may use."""

    cpu_s: float = 5.0
    wall_s: float = 10.0
    memory_mb: int = 512
    output_bytes: int = 65_536
    processes: int = 32
    file_bytes: int = 1_048_576


@dataclass(frozen=True)
class RunResult:
    """How a run ended: its exit status (negative: killed by that signal), output, and what limit
    ended it ("wall", "output" or "" when it ended by itself; a CPU or memory limit shows as a
    nonzero status and a message on stderr)."""

    returncode: int
    stdout: str
    stderr: str
    limit: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.limit


@dataclass(frozen=True)
class Isolation:
    """What this machine's sandbox can do (probed once per process)."""

    isolation: str  # "namespaces" or "audit-hook"
    pids_cgroup: str | None  # the pids cgroup folder new runs' cgroups are made in, else None


@functools.lru_cache(maxsize=1)
def probe() -> Isolation:
    """Whether ``unshare`` can give runs their own namespaces, and where a pids cgroup can be made."""
    namespaces = False
    if shutil.which("unshare"):
        try:
            done = subprocess.run(["unshare", *UNSHARE, "--", sys.executable, "-c", "pass"], capture_output=True, timeout=30)
            namespaces = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            namespaces = False
    return Isolation("namespaces" if namespaces else "audit-hook", _pids_cgroup_root())


def _pids_cgroup_root() -> str | None:
    """A pids cgroup folder this process may create children in (cgroup v1 or v2), else None."""
    for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        controllers = Path(root, "cgroup.controllers")
        if root != "/sys/fs/cgroup/pids" and not (controllers.exists() and "pids" in controllers.read_text().split()):
            continue
        trial = Path(root, f"posttrain-probe-{uuid.uuid4().hex[:8]}")
        try:
            trial.mkdir()
            ok = (trial / "pids.max").exists()
            trial.rmdir()
        except OSError:
            continue
        if ok:
            return root
    return None


def run_python(code: str, stdin: str = "", limits: Limits = Limits(), hidden: Sequence[str] = ()) -> RunResult:
    """Run ``code`` with ``stdin`` under ``limits`` (module docstring), the directories ``hidden``
    invisible to it; never raises for what the code does, only when the sandbox itself cannot start."""
    iso = probe()
    workdir = tempfile.mkdtemp(prefix="posttrain-sandbox-")
    hidden = [os.path.realpath(h) for h in hidden if os.path.isdir(h)]
    cgroup = _make_cgroup(iso.pids_cgroup, limits.processes)
    try:
        script = Path(workdir, "main.py")
        guard = _AUDIT_PRELUDE + (_HIDE_PRELUDE.format(hidden=hidden) if hidden else "")
        script.write_text(code if iso.isolation == "namespaces" else guard + code, encoding="utf-8")
        command = [sys.executable, "-I", str(script)]
        if iso.isolation == "namespaces":
            # sh is the namespace's PID 1, python its child: the kernel shields a PID 1 from the
            # signals of RLIMIT_CPU, so the code must not be PID 1 itself. A hidden directory gets
            # an empty tmpfs over it first (exit 97 if the mount fails: the code never runs unhidden).
            mounts = "".join(f"mount -t tmpfs -o size=4k tmpfs {shlex.quote(h)} || exit 97; " for h in hidden)
            flags = (*UNSHARE, *UNSHARE_MOUNT) if hidden else UNSHARE
            command = ["unshare", *flags, "--", "/bin/sh", "-c", mounts + '"$@"; exit $?', "sh", *command]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "PYTHONIOENCODING": "utf-8"}
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=functools.partial(_limit_child, limits, cgroup), close_fds=True,
        )
        try:
            return _collect(process, stdin.encode("utf-8"), limits)
        finally:
            _kill_tree(process)  # also when the caller's own time limit interrupts us
    finally:
        _remove_cgroup(cgroup)
        shutil.rmtree(workdir, ignore_errors=True)


def _limit_child(limits: Limits, cgroup: str | None) -> None:
    """In the child before exec: its own session (one kill reaches the group), the limits, the cgroup."""
    os.setsid()
    if cgroup is not None:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    memory = limits.memory_mb << 20
    cpu = max(1, int(limits.cpu_s + 0.999))  # RLIMIT_CPU counts whole seconds
    for kind, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, limits.file_bytes),
                        (resource.RLIMIT_NPROC, limits.processes), (resource.RLIMIT_CORE, 0)):
        hard = value + 1 if kind == resource.RLIMIT_CPU else value  # SIGXCPU at the soft limit, SIGKILL a second later
        resource.setrlimit(kind, (value, hard))


def _collect(process: subprocess.Popen, stdin: bytes, limits: Limits) -> RunResult:
    """Feed stdin, read stdout/stderr up to the output limit, until exit or the wall deadline."""
    deadline = time.monotonic() + limits.wall_s
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, out)
        selector.register(process.stderr, selectors.EVENT_READ, err)
        try:
            process.stdin.write(stdin)
            process.stdin.close()
        except BrokenPipeError:
            pass  # the program exited (or closed stdin) without reading it
        limit = ""
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                limit = "wall"
                break
            for key, _ in selector.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
            if len(out) + len(err) > limits.output_bytes:
                limit = "output"
                break
    if limit:
        _kill_tree(process)
    returncode = process.wait(timeout=max(1.0, deadline - time.monotonic()) if not limit else 10)
    keep = limits.output_bytes
    return RunResult(returncode, out[:keep].decode("utf-8", "replace"), err[:keep].decode("utf-8", "replace"), limit)


def _kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL the run's process group (with namespaces, the PID namespace dies with its PID 1)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None and not stream.closed:
            stream.close()


def _make_cgroup(root: str | None, processes: int) -> str | None:
    if root is None:
        return None
    path = Path(root, f"posttrain-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(processes))
    except OSError:
        return None
    return str(path)


def _remove_cgroup(path: str | None) -> None:
    """Remove a run's cgroup once its processes are gone (the kernel reaps a killed tree quickly)."""
    if path is None:
        return
    procs = Path(path, "cgroup.procs")
    for _ in range(200):
        try:
            pids = [int(p) for p in procs.read_text().split()]
            for pid in pids:  # stragglers that escaped the process group (without namespaces)
                os.kill(pid, signal.SIGKILL)
            if not pids:
                os.rmdir(path)
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
