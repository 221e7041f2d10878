"""ROLL's memory profiler switch (``profiler_memory``) and its output folder (``profiler_output_dir``).

ROLL (roll/utils/context_managers.py ``local_profiler``, around every call of a worker's functions,
on each worker's rank 0) records the CUDA memory history with Python stacks (at most 100,000
events) and writes one snapshot pickle per call under
``<profiler_output_dir>/<exp_name>/<time>/<worker>/<function>``. posttrain's ``profiler.tool:
torch_memory`` named alone records the same history (``profiler.torch_memory``: 100,000 events,
here Python stacks) for every step on every rank, one snapshot per step and rank, with each phase's
peak memory (docs/profiling.md), under ``profiler.save_path``: the same records, cut per step rather
than per worker call, and for every rank, not only the first.

Without ``profiler_memory`` (or ``profiler_timeline``) ROLL writes nothing in ``profiler_output_dir``
but Ray timelines when the RAY_PROFILING environment variable is set, which posttrain does not
write: the folder is then dropped.
"""

from __future__ import annotations

from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

MEMORY, FOLDER, TIMELINE = "profiler_memory", "profiler_output_dir", "profiler_timeline"


def profiler_memory(ctx: Context) -> None:
    on = ctx.get(MEMORY, False)
    if ctx.has(MEMORY):
        ctx.consume(MEMORY)
        if on in (False, None):
            ctx.drop(MEMORY, "false (ROLL's default): no memory profile")
        elif on is not True:
            ctx.refuse(MEMORY, f"expected true or false, got {on!r}", "profiler.tool", on)
            return
        else:
            why = "ROLL's CUDA memory history with Python stacks: posttrain's torch_memory alone, one snapshot per step on every rank (ROLL: per worker call, rank 0)"
            ctx.set("profiler.tool", "torch_memory", MEMORY, why)
            ctx.set("profiler.torch_memory.stacks", "python", MEMORY, "ROLL records Python stacks")
    if not ctx.has(FOLDER):
        return
    ctx.consume(FOLDER)
    folder = ctx.get(FOLDER)
    if on is True and isinstance(folder, str) and folder:
        ctx.set("profiler.save_path", folder, FOLDER, "the memory snapshots go there (ROLL adds <exp_name>/<time>/<worker>/<function>)")
    elif ctx.get(TIMELINE) is True:
        ctx.refuse(FOLDER, "the folder of profiler_timeline's traces, which the ROLL dialect does not translate", "profiler.save_path", folder)
    else:
        ctx.drop(FOLDER, "no ROLL profiler is on (profiler_memory, profiler_timeline): ROLL writes only Ray timelines there, "
                         "with the RAY_PROFILING environment variable, which posttrain does not write")


RULES: dict[str, Rule] = {
    MEMORY: Rule("profiler.tool, profiler.torch_memory.stacks", "true: tool torch_memory alone (every step, every rank) with Python stacks; false: nothing", True),
    FOLDER: Rule("profiler.save_path", "with profiler_memory true: where the snapshots go; without a profiler: dropped (ROLL writes only Ray timelines there)", "/tmp/prof", ((MEMORY, True),)),
}
HANDLERS = [profiler_memory]
