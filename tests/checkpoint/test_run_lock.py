"""One run per run directory: a second `posttrain train` on a directory in use is refused at once,
naming the directory and the holder; a dead holder's lock is taken over; the holder's own worker
processes are let in. Every process here is a real one (the lock is the kernel's, per process); the
refused `posttrain train` is forked from posttrain's fork server (tests/fork_run_helpers.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from fork_run_helpers import posttrain_forked

from posttrain.runlock import HOLDER_ENV, LOCK_FILE

REPO = Path(__file__).resolve().parents[2]

# Holds the lock of argv[1] until its stdin closes; with argv[2] == "worker", it first starts a child
# that takes the same lock (as a launcher's worker would) and reports what the child said.
HOLDER = textwrap.dedent("""
    import subprocess, sys
    from posttrain.runlock import hold_run_lock
    with hold_run_lock(sys.argv[1]):
        if sys.argv[2:] == ["worker"]:
            child = subprocess.run([sys.executable, "-c", "import sys; from posttrain.runlock import hold_run_lock\\n"
                                    "with hold_run_lock(sys.argv[1]): print('worker in')", sys.argv[1]],
                                   capture_output=True, text=True)
            print(child.returncode, child.stdout.strip(), child.stderr.strip()[-300:], flush=True)
        print("held", flush=True)
        sys.stdin.read()
""")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != HOLDER_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return dict(env, **extra)


def _start_holder(run_dir: Path, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    lines = []
    while not lines or lines[-1] != "held":
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        lines.append(line.strip())
    return proc, "\n".join(lines)


def test_a_second_run_on_a_directory_in_use_exits_at_once_naming_the_holder(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    config = tmp_path / "c.yaml"
    config.write_text(f"trainer: {{default_local_dir: {run_dir}}}\n")
    holder, _ = _start_holder(run_dir)
    try:
        monkeypatch.delenv(HOLDER_ENV, raising=False)  # not one of a run's own workers
        out = posttrain_forked("train", str(config), cwd=tmp_path, timeout=300)
        assert sorted(p.name for p in run_dir.iterdir()) == [LOCK_FILE]  # the refused run wrote nothing
    finally:
        holder.communicate("")
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{run_dir} is in use by another run: process {holder.pid} on" in out.stderr
    assert "Traceback" not in out.stderr
    assert holder.returncode == 0 and not run_dir.exists()  # the holder released it and removed what it created


def test_a_dead_holders_lock_is_taken_over_and_released_on_exit(tmp_path):
    run_dir = tmp_path / "run"
    holder, _ = _start_holder(run_dir)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (run_dir / LOCK_FILE).is_file()  # the killed holder could not remove it
    second, out = _start_holder(run_dir)
    _, err = second.communicate("")
    assert second.returncode == 0, err
    assert f"taking over the lock of {run_dir} left by process {holder.pid} on" in out
    assert "which is no longer running" in out
    assert list(run_dir.iterdir()) == []  # released: the lock file is gone (the directory was not its to remove)


def test_workers_of_the_holder_are_let_in_and_a_forged_holder_is_not(tmp_path):
    run_dir = tmp_path / "run"
    holder, said = _start_holder(run_dir, "worker")
    try:
        assert said.splitlines()[0] == "0 worker in", said  # the launcher's child took the lock's way in
        stranger = subprocess.run(
            [sys.executable, "-c", "import sys; from posttrain.runlock import hold_run_lock\nwith hold_run_lock(sys.argv[1]): pass",
             str(run_dir)], capture_output=True, text=True, env=_env(**{HOLDER_ENV: "elsewhere:1"}))
        assert stranger.returncode == 1 and "RunDirInUse" in stranger.stderr and f"process {holder.pid}" in stranger.stderr
    finally:
        holder.communicate("")
    assert holder.returncode == 0 and not run_dir.exists()
