"""How much memory this process held: its peak during each phase of a step, and a snapshot.

On a GPU the peak is the CUDA caching allocator's (`torch.cuda.max_memory_allocated`, reset when a
phase begins: host-side counters, no synchronisation). On a CPU tensors live in the process's heap,
so the peak is the resident set's high-water mark: Linux resets it when "5" is written to
/proc/self/clear_refs and reports it as VmHWM in /proc/self/status. Where that reset is not allowed,
the phase's peak falls back to the resident set at its end (a lower bound), and says so.

Every role lives in every worker process (docs/scaling.md), so a phase's peak is the whole
process's memory while that role worked (its weights and everyone else's), not memory owned by it.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int | None:
    """A `kB` field of /proc/self/status (VmRSS, VmHWM), or None off Linux."""
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def malloc_stats() -> dict[str, int]:
    """glibc's allocator statistics (mallinfo2): bytes in use in its arenas and in mmapped blocks
    (large tensors), and bytes free but kept in the arenas; {} where glibc or mallinfo2 is missing."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    info = fn()
    return {"heap_in_use_bytes": info.uordblks, "mmapped_bytes": info.hblkhd, "heap_free_bytes": info.fordblks}


class MemoryProbe:
    """Peak memory of this process between `begin()` and `end()`."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.exact = self.cuda or self._reset_hwm()  # False: CPU peaks are the RSS at each phase's end

    def begin(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.exact:
            self._reset_hwm()

    def end(self) -> int:
        """Bytes: the peak since `begin` (see the module docstring for what that is on each device)."""
        if self.cuda:
            return int(torch.cuda.max_memory_allocated(self.device))
        kib = _status_kib("VmHWM" if self.exact else "VmRSS")
        return 0 if kib is None else kib * 1024

    def snapshot(self) -> dict[str, int]:
        """What the process holds now: RSS and the allocator's statistics (CUDA's on a GPU)."""
        out = {"rss_bytes": rss_bytes() or 0}
        if self.cuda:
            out["cuda_allocated_bytes"] = int(torch.cuda.memory_allocated(self.device))
            out["cuda_reserved_bytes"] = int(torch.cuda.memory_reserved(self.device))
        else:
            out.update(malloc_stats())
        return out

    @staticmethod
    def _reset_hwm() -> bool:
        try:
            _CLEAR_REFS.write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
            return True
        except OSError:
            return False
