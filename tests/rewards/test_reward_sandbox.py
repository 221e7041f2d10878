"""The local code sandbox and the `code` scorer: hostile programs are stopped (an endless loop, a
memory bomb, a fork bomb, an output flood, a detached child) and cannot reach the network; test
cases pass and fail as written."""

from __future__ import annotations

import doctest
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from posttrain.config import load_config
from posttrain.rewards import RewardInput, code
from posttrain.sandbox import Limits, probe, run_python
from posttrain.trainer.rewarding import build_router, reward_function

TIGHT = Limits(cpu_s=1, wall_s=3, memory_mb=256, output_bytes=4096, processes=16)


def _alive(marker: str) -> list[int]:
    """Processes whose command line mentions `marker` (a run's temporary folder)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def test_a_program_reads_stdin_and_writes_stdout():
    result = run_python("import sys\nprint(sys.stdin.read().strip()[::-1])", "abc", TIGHT)
    assert result.ok and result.stdout == "cba\n"
    assert run_python("raise SystemExit(3)", "", TIGHT).returncode == 3


def test_an_endless_loop_is_stopped():
    start = time.monotonic()
    result = run_python("while True:\n    pass", "", TIGHT)
    assert not result.ok and time.monotonic() - start < 15
    assert result.limit == "wall" or "CPU time limit" in result.stderr or result.returncode in (152, -24)


def test_a_memory_bomb_fails_inside_its_limit():
    result = run_python("block = bytearray(2 << 30)\nprint('allocated')", "", TIGHT)
    assert not result.ok and "MemoryError" in result.stderr and "allocated" not in result.stdout


def test_a_fork_bomb_is_bounded_and_leaves_nothing_behind():
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except (OSError, PermissionError):\n        time.sleep(30)\n"
    start = time.monotonic()
    result = run_python(bomb, "", Limits(cpu_s=2, wall_s=3, memory_mb=256, processes=16))
    assert not result.ok and time.monotonic() - start < 20
    time.sleep(0.5)
    assert _alive("posttrain-sandbox-") == []


def test_a_detached_child_dies_with_the_run():
    escape = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent done')"
    run_python(escape, "", TIGHT)
    time.sleep(0.5)
    assert _alive("posttrain-sandbox-") == []


def test_an_output_flood_is_cut_off():
    result = run_python("while True:\n    print('x' * 1000)", "", TIGHT)
    assert result.limit == "output" and len(result.stdout) <= TIGHT.output_bytes


def test_the_network_is_out_of_reach():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    probe_code = (
        "import socket\n"
        f"for address in [('127.0.0.1', {port}), ('1.1.1.1', 53)]:\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=1)\n"
        "        print('reached', address)\n"
        "    except OSError as error:\n"
        "        print('blocked', type(error).__name__)\n"
    )
    result = run_python(probe_code, "", TIGHT)
    server.close()
    assert "reached" not in result.stdout and not accepted  # the host's own loopback server too
    if probe().isolation == "namespaces":
        assert result.stdout.count("blocked") == 2
    else:
        assert "PermissionError" in result.stderr


CASES = {"case_type": "input", "test_cases": [{"stdin": "3 4\n", "expected_stdout": "7\n"}, {"stdin": "10 -2", "expected_stdout": "8"}]}
ASSERTS = {"case_type": "assert", "test_cases": [{"assert_code": "assert add(2, 2) == 4"}, {"assert_code": "assert add(-1, 1) == 0"}]}


@pytest.mark.parametrize("response, truth, score, rate", [
    ("```python\na, b = map(int, input().split())\nprint(a + b)\n```", CASES, 1.0, 1.0),
    ("```python\na, b = map(int, input().split())\nprint(a * b if a == 10 else a + b)\n```", CASES, 0.0, 0.5),
    ("def add(a, b):\n    return a + b<|im_end|>", json.dumps(ASSERTS), 1.0, 1.0),
    ("```py\ndef add(a, b):\n    return a - b\n```", ASSERTS, 0.0, 0.0),  # 2 - 2 != 4 and -1 - 1 != 0
    ("```py\ndef add(a, b):\n    return a * b + 0 if a > 0 else a + b\n```", ASSERTS, 1.0, 1.0),
])
def test_code_scorer_runs_the_cases(response, truth, score, rate):
    out = code.code_score("code", response, truth, wall_s=5)
    assert out["score"] == score
    assert out["pass_rate"] == rate and out["timeouts"] == 0.0


def test_code_scorer_scores_a_hanging_program_zero_and_says_so():
    out = code.code_score("code", "while True:\n    pass", CASES, cpu_s=1, wall_s=2)
    assert out == {"score": 0.0, "pass_rate": 0.0, "timeouts": 1.0}


def test_a_bad_code_row_is_a_counted_failure_of_the_code_worker():
    assert doctest.testmod(code).failed == 0
    cfg = load_config(None, ["reward.workers.code.worker_cls=code", "reward.workers.code.tag_included=[kodcode]",
                             "reward.workers.code.reward_kwargs={wall_s: 5}", "reward.on_error=fixed"])
    router = build_router(cfg, reward_function(cfg))
    out = router.score([RewardInput("kodcode", "print(7)", {"tests": []}, index=0), RewardInput("kodcode", "print(7)", CASES, index=1)])
    assert out.scores == [0.0, 0.0] and out.workers["code"].failures == 1 and out.num_failures == 1
    router.close()
    bad = load_config(None, ["reward.workers.code.worker_cls=code", "reward.workers.code.tag_included=[k]",
                             "reward.workers.code.reward_kwargs={wall_seconds: 5}"])
    with pytest.raises(Exception, match="wall_seconds"):
        reward_function(bad)


def test_without_namespaces_an_audit_hook_blocks_network_and_new_processes(monkeypatch):
    from posttrain import sandbox

    monkeypatch.setattr(sandbox, "probe", lambda: sandbox.Isolation("audit-hook", None))
    net = run_python("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)", "", TIGHT)
    fork = run_python("import os\nos.fork()\nprint('forked')", "", TIGHT)
    spawn = run_python("import subprocess\nsubprocess.run(['true'])\nprint('spawned')", "", TIGHT)
    for result, event in ((net, "socket."), (fork, "os.fork"), (spawn, "subprocess.Popen")):
        assert not result.ok and f"posttrain sandbox: {event}" in result.stderr, result.stderr
    assert run_python("print(sum(range(10)))", "", TIGHT).stdout == "45\n"


@pytest.mark.parametrize("isolation", ["namespaces", "audit-hook"])
def test_hidden_directories_are_invisible_to_the_code(tmp_path, monkeypatch, isolation):
    from posttrain import sandbox

    if isolation == "namespaces" and probe().isolation != "namespaces":
        pytest.skip("this machine has no user namespaces")
    monkeypatch.setattr(sandbox, "probe", lambda: sandbox.Isolation(isolation, None))
    secret = tmp_path / "run"
    secret.mkdir()
    (secret / "key.txt").write_text("s3cret")
    code = f"import os\ntry:\n    print(open({str(secret / 'key.txt')!r}).read())\nexcept OSError as e:\n    print('refused', type(e).__name__)\n"
    assert run_python(code, "", TIGHT).stdout == "s3cret\n"
    hidden = run_python(code, "", TIGHT, hidden=[str(secret)])
    assert hidden.stdout.startswith("refused") and "s3cret" not in hidden.stdout
