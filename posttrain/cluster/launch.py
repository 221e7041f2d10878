"""Starting N local worker processes for one `posttrain train` command, and watching them.

The command the user typed becomes the launcher: it prepares the run's inputs once, then starts
`world_size` copies of itself (`python -m posttrain train CONFIG overrides...`), each told its rank
by the environment (`posttrain.cluster.world`). Rank 0's output is the run's console; every rank's
error output also goes to `<log dir>/rank<r>.log` (`<run dir>/workers` unless `log.dir` says;
posttrain.cluster.process_logs).

The launcher's only other job is to end the run cleanly when a worker does not finish: a worker that
exits non-zero or is killed (SIGKILL, out of memory) stops the others, and the launcher exits
non-zero naming the rank, how it ended and the last lines of its log. A worker that hangs is caught
by the others' collective timeout (`cluster.rpc_timeout_s`), which fails them the same way.
Checkpoints are written so that a killed run never names a half-written one; rerunning the command
resumes from the newest complete checkpoint.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from posttrain.cluster import RANK_ENV, WORLD_ENV
from posttrain.cluster.process_logs import log_paths
from posttrain.cluster.process_start import start_process

# Roles every worker hosts: all roles share each process (colocated placement).
ROLES = "actor, rollout, reference, critic, reward"
EXPLORER_ROLES = "rollout, reward (an explorer: posttrain.trainer.decoupled)"
REFERENCE_ROLES = "reference (a reference crew: posttrain.trainer.reference_crew)"
GRACE_S = 10.0  # how long the other workers get to notice a dead peer and exit on their own
# After a collective timed out the peers' own timeouts fire within moments, and a hung worker will
# not exit at all: waiting the full grace would only delay the message.
TIMEOUT_GRACE_S = 3.0


def how_it_ended(code: int) -> str:
    """A worker's exit status in words; negative: killed by that signal."""
    if code >= 0:
        return f"exited with status {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 6) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def worker_env(rank: int, world_size: int, local_rank: int, master: tuple[str, int], device: str,
               env_vars: dict[str, str], threads: int | None) -> dict[str, str]:
    """What a worker process learns from its environment: its rank, the world, where rank 0 listens,
    its device, the config's `cluster.env_vars`, and its share of the CPU threads."""
    env = {k: str(v) for k, v in env_vars.items()}
    env.update({
        RANK_ENV: str(rank), WORLD_ENV: str(world_size), "LOCAL_RANK": str(local_rank),
        "MASTER_ADDR": master[0], "MASTER_PORT": str(master[1]), "POSTTRAIN_DEVICE": device,
    })
    if threads is not None and "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def launch(argv: list[str], world_size: int, run_dir: Path, device: str, env_vars: dict[str, str], log: Any = None,
           prefix: Callable[[int], list[str]] | None = None, devices: list[int] | None = None, roles: str = ROLES,
           log_name: str = "rank") -> int:
    """Run `python -m posttrain <argv>` as `world_size` workers; returns the launcher's exit status.
    `log` is the config's log section (where the workers' log files go); `prefix(rank)`, when given,
    is put in front of each worker's command (`nsys profile ...`: posttrain.cluster.nsight). `devices`
    gives each rank's device (LOCAL_RANK; default: its rank), `roles` what the workers host, and
    `log_name` their log files' names (`<log_name><rank>.log`)."""
    master = ("127.0.0.1", free_port())
    procs: list = []  # subprocess.Popen or process_start.ForkedProcess
    logs = log_paths(log, run_dir, [f"{log_name}{r}" for r in range(world_size)])
    log_dir = logs[0].parent
    threads = max(1, (os.cpu_count() or 1) // world_size)  # each worker computes on its own share of the cores
    for rank in range(world_size):
        local = devices[rank] if devices else rank
        env = dict(os.environ, **worker_env(rank, world_size, local, master, device, env_vars, threads))
        err = logs[rank].open("w", encoding="utf-8")
        out = None if rank == 0 else err  # rank 0 is the console; the others only log
        procs.append(start_process(argv, env, out, err, device=device, prefix=prefix(rank) if prefix else None))
        err.close()
    print(f"posttrain: {world_size} worker processes on {device} (pids {', '.join(str(p.pid) for p in procs)}); "
          f"each hosts {roles}; logs in {log_dir}", flush=True)
    return watch(procs, logs, roles=roles)


def launch_halves(argv: list[str], run_dir: Path, halves: dict[str, dict[str, str]], log: Any = None,
                  prefix: Callable[[int], list[str]] | None = None, devices: dict[str, int] | None = None,
                  helpers: tuple[str, ...] = (), names: dict[str, str] | None = None) -> int:
    """Run `python -m posttrain <argv>` once per half of a run: the trainer and the explorer of a
    decoupled run (`posttrain.trainer.decoupled`), and the reference crew when the reference has
    devices of its own (`posttrain.trainer.reference_crew`); `halves` maps each half's name to the
    variables that tell it which it is. Watched like workers. The first half's output (the trainer's)
    is the console; each logs to `<log dir>/<half>.log`. Each half may start workers of its own
    (`launch`); a half of one process computes on its device in `devices` (by half; default 0).
    `helpers` name the halves that serve the others (the reference crew): once the others have all
    finished they are stopped, as their work is done. `names` say what a half is in messages."""
    order = list(halves)
    logs = log_paths(log, run_dir, order)
    log_dir = logs[0].parent
    threads = max(1, (os.cpu_count() or 1) // len(order))
    procs = []
    runtime_env = tuple(dict.fromkeys(k for extra in halves.values() for k in extra))
    for half, log in zip(order, logs):
        env = dict(os.environ, **halves[half])
        if "LOCAL_RANK" not in os.environ:
            env["LOCAL_RANK"] = str((devices or {}).get(half, 0))
        if "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(threads)
        err = log.open("w", encoding="utf-8")
        procs.append(start_process(argv, env, None if half == order[0] else err, err,
                                   prefix=prefix(len(procs)) if prefix else None, runtime_env=runtime_env))
        err.close()
    shown = {half: f"{half} (pid {p.pid})" for half, p in zip(order, procs)}
    if "explorer" in halves:
        print(f"posttrain: decoupled run: {shown['trainer']} and {shown['explorer']} meet in the experience buffer; logs in {log_dir}",
              flush=True)
    for half in helpers:
        print(f"posttrain: {shown[half]}: the {half} role on devices of its own, serving the trainer; logs in {log_dir}", flush=True)
    names = names or {}
    return watch(procs, logs, names=[names.get(half, f"the {half} process") for half in order],
                 helpers={order.index(h) for h in helpers})


def watch(procs: list, logs: list[Path], names: list[str] | None = None, roles: str = ROLES, helpers: set[int] = frozenset()) -> int:
    """`_watch` the workers (Popen-like: poll, returncode, send_signal, wait, kill); Ctrl-C stops them.
    `names` says what each is in messages (default: worker rank r of N and the `roles` it hosts);
    `helpers` index the processes that serve the others, stopped once the others have finished."""
    names = names or [f"worker rank {r} of {len(procs)} (roles: {roles})" for r in range(len(procs))]
    try:
        return _watch(procs, logs, names, helpers)
    except KeyboardInterrupt:
        _stop(procs, signal.SIGINT)
        print("posttrain: interrupted", file=sys.stderr)
        return 130


def _watch(procs: list, logs: list[Path], names: list[str], helpers: set[int] = frozenset()) -> int:
    """Wait for the workers; when one fails, give the others `GRACE_S` to notice, stop the rest,
    and report the worker that caused it (see `_cause`). When every process but the `helpers` has
    finished well, the helpers' work is done: they get `GRACE_S` to leave on their own, then are stopped."""
    order: list[int] = []  # ranks in the order they were seen to end
    done_at = None  # when the last process that is not a helper finished
    while len(order) < len(procs):
        for rank, p in enumerate(procs):
            if rank not in order and p.poll() is not None:
                order.append(rank)
        if any(procs[r].returncode != 0 for r in order):
            break
        if helpers and all(r in order for r in range(len(procs)) if r not in helpers):
            done_at = done_at or time.monotonic()
            if time.monotonic() - done_at > GRACE_S:
                _stop(procs, signal.SIGTERM)
                return 0
        time.sleep(0.2)
    else:
        return 0
    first = next(r for r in order if procs[r].returncode != 0)
    deadline = time.monotonic() + (TIMEOUT_GRACE_S if _timed_out(logs[first]) else GRACE_S)
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    hung = [r for r, p in enumerate(procs) if p.poll() is None]  # still running after their peer failed
    _stop(procs, signal.SIGKILL)
    return _report(procs, logs, names, _cause(procs, logs, first, hung), hung)


def _cause(procs: list, logs: list[Path], first: int, hung: list[int]) -> int:
    """The worker that ended the run: one killed by a signal (SIGKILL, the out-of-memory killer),
    else a worker that stopped responding when the first failure was a peer's collective timing out
    (`cluster.rpc_timeout_s`), else the first worker that failed."""
    killed = [r for r, p in enumerate(procs) if p.returncode is not None and p.returncode < 0 and r not in hung]
    if killed:
        return killed[0]
    if hung and _timed_out(logs[first]):
        return hung[0]
    return first


def _timed_out(log: Path) -> bool:
    """Whether a worker's log ends with a collective's timeout (gloo: "Timed out", NCCL: "timed out")."""
    return any("Timed out" in line or "timed out" in line for line in tail(log, 20))


def _report(procs: list, logs: list[Path], names: list[str], cause: int, hung: list[int]) -> int:
    code = procs[cause].returncode
    if code == 2 and cause not in hung:  # a user error: the worker printed its one-line message
        for line in tail(logs[cause], 1):
            print(line, file=sys.stderr)
        return 2
    how = "stopped responding (its peers timed out waiting for it: cluster.rpc_timeout_s)" if cause in hung else (
        getattr(procs[cause], "how", None) or how_it_ended(code))
    print(f"posttrain: error: {names[cause]} {how}; the run stopped. "
          f"Rerun the same command to resume from the newest complete checkpoint. Its log: {logs[cause]}",
          file=sys.stderr)
    for line in tail(logs[cause]):
        print(f"  {logs[cause].stem}: {line}", file=sys.stderr)
    return 1


def _stop(procs: list, sig: int) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
