"""The profiling tools behind `posttrain.trainer.profiling.StepProfiler`: torch.profiler traces
(whole steps or one phase at a time), per-phase memory records (with a CUDA memory snapshot on a
GPU) and Nsight Systems ranges. Imported only when a run profiles something.

Every rank writes its own files, the rank in their names (`step3_rank1.json`): a trace is one
process's view, and the processes do not wait for each other to write them.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

import torch
import torch.profiler

from posttrain.trainer.memory import MemoryProbe
from posttrain.trainer.profile_plan import PHASE_ROLE, ProfilePlan, Tool, trace_name


def _activities(contents: tuple[str, ...], device: str) -> list[torch.profiler.ProfilerActivity]:
    """What the trace records; no contents means the CPU, and the GPU's kernels on a GPU (verl's default)."""
    cpu, cuda = torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA
    if not {"cpu", "cuda"} & set(contents):
        return [cpu, cuda] if device == "cuda" else [cpu]
    return [a for name, a in (("cpu", cpu), ("cuda", cuda)) if name in contents]


def _torch_profiler(contents: tuple[str, ...], device: str) -> torch.profiler.profile:
    return torch.profiler.profile(
        activities=_activities(contents, device), record_shapes="shapes" in contents,
        profile_memory="memory" in contents, with_stack="stack" in contents,
    )


def _export(prof: torch.profiler.profile, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))


class WholeStepTrace:
    """tool torch, continuous: one trace per window of steps on each rank, `<out>/e2e/`, every phase
    a `record_function` range named as in the step's timings (`timing/<phase>_s`)."""

    def __init__(self, plan: ProfilePlan):
        self.plan = plan
        self.prof: torch.profiler.profile | None = None

    def start(self, step: int) -> None:
        self.prof = _torch_profiler(self.plan.contents[""], self.plan.device)
        self.prof.start()

    def stop(self, first: int, last: int) -> None:
        prof, self.prof = self.prof, None
        prof.stop()
        _export(prof, self.plan.out_dir / "e2e" / trace_name(first, last, self.plan.rank, ".json"))

    def phase(self, step: int, name: str) -> contextlib.AbstractContextManager:
        return torch.profiler.record_function(name)


class PhaseTraces:
    """tool torch, discrete: one trace per phase of each enabled role, `<out>/<role>/step<N>_<phase>_rank<r>.json`."""

    def __init__(self, plan: ProfilePlan):
        self.plan = plan

    def start(self, step: int) -> None:
        pass

    def stop(self, first: int, last: int) -> None:
        pass

    @contextlib.contextmanager
    def phase(self, step: int, name: str) -> Iterator[None]:
        role = PHASE_ROLE.get(name)
        if role not in self.plan.roles:
            yield
            return
        prof = _torch_profiler(self.plan.contents[role], self.plan.device)
        prof.start()
        try:
            with torch.profiler.record_function(name):
                yield
        finally:
            prof.stop()
            _export(prof, self.plan.out_dir / role / f"step{step}_{name}_rank{self.plan.rank}.json")


class MemoryRecord:
    """tool torch_memory: per phase the peak and the end-of-phase memory of this process (RSS and
    the allocator's statistics) in `<out>/torch_memory/step<N>_rank<r>.json`; on a GPU also the CUDA
    memory history of the window (`.pickle`, for pytorch.org/memory_viz)."""

    def __init__(self, plan: ProfilePlan):
        self.plan = plan
        self.probe = MemoryProbe(torch.device(plan.device))
        self.phases: list[dict] = []

    def start(self, step: int) -> None:
        self.phases = []
        if self.probe.cuda:
            m = self.plan.memory
            record_memory_history(context=m.context, stacks=m.stacks, max_entries=m.trace_alloc_max_entries)

    def stop(self, first: int, last: int) -> None:
        out = self.plan.out_dir / "torch_memory"
        out.mkdir(parents=True, exist_ok=True)
        body = {"rank": self.plan.rank, "device": self.plan.device, "peak_is_exact": self.probe.exact, "phases": self.phases}
        (out / trace_name(first, last, self.plan.rank, ".json")).write_text(json.dumps(body, indent=1))
        if self.probe.cuda:
            torch.cuda.memory._dump_snapshot(str(out / trace_name(first, last, self.plan.rank, ".pickle")))
            torch.cuda.memory._record_memory_history(enabled=None)

    @contextlib.contextmanager
    def phase(self, step: int, name: str) -> Iterator[None]:
        self.probe.begin()
        try:
            yield
        finally:
            self.phases.append({"step": step, "phase": name, "peak_bytes": self.probe.end(), **self.probe.snapshot()})


def record_memory_history(context: str, stacks: str, max_entries: int) -> None:
    """Start the CUDA caching allocator's event history (profiler.torch_memory)."""
    torch.cuda.memory._record_memory_history(enabled="all", context=context, stacks=stacks, max_entries=max_entries)


class NsysRanges:
    """tool nsys: a cudaProfilerApi capture range over each window and an NVTX range per phase, for a
    run started under `nsys profile --capture-range=cudaProfilerApi` (Nsight Systems writes the files).
    Discrete (verl's ``nsys.discrete: true``): no window range; each phase of an enabled role is a
    capture range of its own around its NVTX range (with ``capture-range-end: repeat...``, one report
    each), as verl's profiler starts and stops one around each worker task. Tested on CPU with the
    capture calls faked; the real ranges need an NVIDIA GPU under nsys."""

    def __init__(self, plan: ProfilePlan):
        self.plan = plan

    def start(self, step: int) -> None:
        if not self.plan.discrete:
            torch.cuda.profiler.start()

    def stop(self, first: int, last: int) -> None:
        if not self.plan.discrete:
            torch.cuda.profiler.stop()

    @contextlib.contextmanager
    def phase(self, step: int, name: str) -> Iterator[None]:
        captured = self.plan.discrete and PHASE_ROLE.get(name) in self.plan.roles
        if captured:
            torch.cuda.profiler.start()
        try:
            with torch.cuda.nvtx.range(name):
                yield
        finally:
            if captured:
                torch.cuda.profiler.stop()


def make_tool(plan: ProfilePlan) -> Tool:
    if plan.tool == "torch":
        return PhaseTraces(plan) if plan.discrete else WholeStepTrace(plan)
    if plan.tool == "torch_memory":
        return MemoryRecord(plan)
    if plan.tool == "nsys":
        return NsysRanges(plan)
    raise ValueError(f"profiler.tool={plan.tool!r} has no implementation (refused by the checks)")


__all__ = ["MemoryRecord", "NsysRanges", "PhaseTraces", "WholeStepTrace", "make_tool", "record_memory_history"]
