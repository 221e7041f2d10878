"""The fork server (posttrain.cluster.forkserver, .process_start): a process it forks is what
`python -m MODULE ARGV` would have been, and its handle answers as a Popen does.

The servers here preload only a small probe module (tmp_path), so each starts in about a second;
the launches of the multi-process tests use the real preload.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posttrain.cluster import process_start
from posttrain.cluster.process_start import ForkedProcess, ForkServer, start_process

PROBE = '''
import json, os, sys, threading
import torch
record = {
    "argv": sys.argv[1:], "argv0": os.path.basename(sys.argv[0]), "cwd": os.getcwd(), "path0": sys.path[0],
    "env": {k: os.environ.get(k) for k in ("RANK", "PROBE_VALUE", "OMP_NUM_THREADS")},
    "threads": torch.get_num_threads(), "name": __name__, "spec": __spec__.name,
    "stdout_tty": sys.stdout.isatty(), "line_buffering": sys.stdout.line_buffering,
}
print(json.dumps(record))
print("to stderr", file=sys.stderr)
mode = sys.argv[1]
if mode == "exit":
    threading.Thread(target=lambda: print("thread joined", flush=True)).start()
    import atexit
    atexit.register(lambda: print("atexit ran", flush=True))
    sys.exit(3)
if mode == "message":
    sys.exit("a message")
if mode == "raise":
    raise RuntimeError("boom")
if mode == "interrupt":
    raise KeyboardInterrupt
if mode == "sleep":
    import time
    time.sleep(60)
'''


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe")
    (root / "probe").mkdir()
    (root / "probe" / "__init__.py").write_text("")
    (root / "probe" / "__main__.py").write_text(PROBE)
    return root


@pytest.fixture
def probe(probe_dir, monkeypatch) -> Path:
    """A module `probe` in the working directory, as it would be for `python -m probe`."""
    monkeypatch.chdir(probe_dir)
    return probe_dir


@pytest.fixture(scope="module")
def server(probe_dir):
    """One server for the module's tests; its preload is torch alone."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(probe_dir), *sys.path]))
    s = ForkServer(env, preload=["torch"])
    yield s
    s.close()


def run(server: ForkServer, probe: Path, mode: str, **env: str) -> tuple[ForkedProcess, str, str]:
    out, err = probe / f"{mode}.out", probe / f"{mode}.err"
    with out.open("w") as o, err.open("w") as e:
        proc = server.start(["python", "-m", "probe", mode], [mode], dict(server.env, **env), o, e, module="probe")
    proc.wait(timeout=60)
    return proc, out.read_text(), err.read_text()


def test_a_forked_process_sees_what_a_fresh_interpreter_sees(server, probe):
    env = {"RANK": "1", "PROBE_VALUE": "x", "OMP_NUM_THREADS": "1"}
    forked, out, err = run(server, probe, "exit", **env)
    fresh = subprocess.run([sys.executable, "-m", "probe", "exit"], env=dict(server.env, **env), capture_output=True,
                           text=True, timeout=60)
    assert forked.returncode == fresh.returncode == 3
    assert json.loads(out.splitlines()[0]) == json.loads(fresh.stdout.splitlines()[0])
    assert json.loads(out.splitlines()[0])["threads"] == 1  # OMP_NUM_THREADS of the request, not of the server
    # the interpreter's exit sequence: threads joined, then atexit handlers
    assert out.splitlines()[1:] == fresh.stdout.splitlines()[1:] == ["thread joined", "atexit ran"]
    assert err == fresh.stderr == "to stderr\n"


@pytest.mark.parametrize("mode, code, said", [("message", 1, "a message"), ("raise", 1, "RuntimeError: boom"),
                                              ("interrupt", -signal.SIGINT, "KeyboardInterrupt")])
def test_a_forked_process_ends_as_an_interpreter_ends(server, probe, mode, code, said):
    forked, _, err = run(server, probe, mode)
    assert forked.returncode == code and said in err


def test_the_handle_answers_as_a_popen_does(server, probe):
    with (probe / "sleep.out").open("w") as o:
        proc = server.start(["probe"], ["sleep"], server.env, o, o, module="probe")
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.3)
    proc.send_signal(signal.SIGSTOP)  # stopped is not ended
    time.sleep(0.3)
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL and proc.returncode == -signal.SIGKILL
    proc.kill()  # an ended process is not signalled again (its pid may be another's by now)


def test_a_server_with_threads_refuses_and_the_start_is_a_plain_process(probe, monkeypatch, caplog):
    (probe / "threaded.py").write_text("import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(probe), *sys.path]))
    monkeypatch.setattr(process_start, "PRELOAD", ["threaded"])
    monkeypatch.setattr(process_start, "_SERVERS", {})
    monkeypatch.setattr(process_start, "_REFUSED", [])
    monkeypatch.setattr(process_start, "plain_process", lambda command, *args: ("popen", command))
    with caplog.at_level(logging.WARNING, "posttrain"):
        assert start_process(["--version"], env, None, None, device="cpu")[0] == "popen"
    assert "starting plain worker processes: the fork server runs 2 Python threads" in caplog.text
    assert start_process(["--version"], env, None, None, device="cpu")[0] == "popen"  # no second try
    assert caplog.text.count("starting plain") == 1


def test_one_place_chooses_between_a_fork_and_a_fresh_interpreter(probe, monkeypatch):
    """GPU processes, prefixed commands and POSTTRAIN_FORK_SERVER=0 start fresh; a CPU start forks,
    from one server per environment (variables read only at run time do not count)."""
    started = []
    monkeypatch.setattr(process_start, "_SERVERS", {})
    monkeypatch.setattr(process_start, "_REFUSED", [])
    monkeypatch.setattr(process_start, "ForkServer", lambda env: started.append(env) or FakeServer())
    monkeypatch.setattr(process_start, "plain_process", lambda command, *args: ("popen", command))
    base = dict(os.environ)
    assert start_process(["x"], base, None, None, device="cuda")[0] == "popen"
    assert start_process(["x"], base, None, None, device="cpu", prefix=["nsys", "profile", "--"])[1][:3] == ["nsys", "profile", "--"]
    assert start_process(["x"], dict(base, POSTTRAIN_RANK="0", OMP_NUM_THREADS="1"), None, None, device="cpu") == "forked"
    assert start_process(["x"], dict(base, POSTTRAIN_RANK="1", ROLE="a"), None, None, device="cpu", runtime_env=("ROLE",)) == "forked"
    assert len(started) == 1 and "POSTTRAIN_RANK" not in started[0]
    assert start_process(["x"], dict(base, HF_HOME="/elsewhere"), None, None, device="cpu") == "forked"
    assert len(started) == 2 and started[1]["HF_HOME"] == "/elsewhere"  # read at import: a server of its own
    monkeypatch.setenv("POSTTRAIN_FORK_SERVER", "0")
    assert start_process(["x"], base, None, None, device="cpu")[0] == "popen"


class FakeServer:
    def start(self, *args, **kw):
        return "forked"

    def running(self):
        return False

    def close(self):
        pass
