"""Process-wide settings the `posttrain` command applies at start-up, before torch is imported.

Both are read once by the runtime they tune, so they must come first; an explicit setting in the
environment always wins. Scripts that drive posttrain as a library can call `configure_process`
as their first line to run as the command does (benchmarks/bench_workers.py does).

- `OMP_WAIT_POLICY=PASSIVE`: idle OpenMP threads sleep instead of spinning. Spinning threads steal
  the cores that generation, reward workers and other processes need (docs/performance.md,
  "Measuring honestly").
- One malloc arena (glibc `mallopt(M_ARENA_MAX, 1)`, as `MALLOC_ARENA_MAX=1` would): the rollout
  engine decodes on its own threads (`rollout.engine_kwargs.hf.decode_workers`), and glibc gives
  each thread an arena whose freed memory the training thread cannot reuse. Measured on the GRPO
  benchmark (16 tokens, 2 threads): peak RSS 1,073 MiB with per-thread arenas, 982 MiB with one,
  970 MiB decoding on one thread. Only on glibc; elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def configure_process() -> None:
    """Apply the settings above; call before `import torch` and before starting any thread."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "MALLOC_ARENA_MAX" not in os.environ:
        share_one_malloc_arena()


def share_one_malloc_arena() -> bool:
    """Make every thread allocate from glibc's main arena; False where that is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1))
    except (OSError, AttributeError):
        return False
