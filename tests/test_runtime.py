"""`posttrain.runtime.configure_process`: what the `posttrain` command sets before torch starts."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

PROBE = """
import json, os, sys, threading
from posttrain.runtime import configure_process, share_one_malloc_arena
configure_process()
# glibc's malloc_stats() prints one "Arena N:" block per arena to stderr.
import ctypes
def alloc():
    blocks = [bytearray(4096) for _ in range(2000)]
threads = [threading.Thread(target=alloc) for _ in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
ctypes.CDLL(None).malloc_stats()
print(json.dumps({"omp": os.environ.get("OMP_WAIT_POLICY"), "torch_loaded": "torch" in sys.modules}))
"""


def probe(**env) -> tuple[dict, int]:
    full = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "MALLOC_ARENA_MAX")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr.count("Arena ")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc arenas are a glibc setting")
def test_one_arena_and_sleeping_openmp_threads_unless_the_environment_says_otherwise():
    settings, arenas = probe()
    assert settings == {"omp": "PASSIVE", "torch_loaded": False}
    assert arenas == 1  # four allocating threads, all in the main arena
    settings, arenas = probe(OMP_WAIT_POLICY="ACTIVE", MALLOC_ARENA_MAX="8")
    assert settings["omp"] == "ACTIVE" and arenas > 1  # the user's settings win


def test_the_command_line_does_not_import_torch_before_configuring():
    code = "import sys, posttrain.cli, os; print('torch' in sys.modules, os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "PASSIVE"]
