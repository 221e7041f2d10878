"""`profiler`: which steps are profiled, with which tool, and where the results go (verl's
`global_profiler`); and `ProfilerConfig`, the per-role settings held by `actor.profiler`,
`ref.profiler`, `critic.profiler` and `reward.reward_model.profiler` (which roles and ranks).

Every worker process hosts every role (docs/scaling.md), so one process runs one profiler at a
time. A step is profiled on a rank when some role with `enable` selects that rank (`all_ranks`, or
`ranks`, or rank 0 when both are unset, as in verl). Continuous mode (`discrete: false`) writes one
trace per rank for the whole step, every phase in it as a named range; discrete mode writes one
trace per phase of each enabled role. The rollout follows the actor's settings (verl's hybrid
actor-rollout worker), the advantage computation is the driver's and shows only in whole-step
traces. The profiler itself lives in `posttrain.trainer.profiling`; docs/profiling.md tells how to
read what it writes.
"""

from __future__ import annotations

from posttrain.config.fields import param, section

_VERL = "verl:global_profiler"

TOOLS = (None, "torch", "torch_memory", "nsys", "npu")
CONTENTS = ("cpu", "cuda", "memory", "shapes", "stack")


@section
class ProfilerConfig:
    """Which ranks of one role are profiled, and how (the tool is `profiler.tool`)."""

    enable: bool = param(False, doc="Profile this role in the steps of profiler.steps.", refs=["verl:.enable"])
    all_ranks: bool = param(False, doc="Profile every rank (worker process) of the role.", refs=["verl:.all_ranks"])
    ranks: list[int] = param(factory=list, doc="Ranks to profile when not all_ranks; empty profiles rank 0.", ge=0, refs=["verl:.ranks"])
    discrete: bool = param(False, doc="tool torch: one trace per phase of this role (true) instead of one trace of the whole step per rank (false); tool nsys: one cudaProfilerApi capture range per phase of this role instead of one per profiled step (verl's nsys.discrete); every enabled role must agree.", refs=["verl:.tool_config.torch.discrete", "verl:.discrete"])
    contents: list[str] = param(factory=list, doc="tool torch: what the trace records: cpu (operators), cuda (kernels), memory (allocations), shapes (operator input shapes), stack (Python source lines); empty records cpu, and cuda on GPUs.", choices=CONTENTS, refs=["verl:.tool_config.torch.contents"])


@section
class TorchMemoryConfig:
    """CUDA memory history of tool torch_memory (torch.cuda.memory._record_memory_history)."""

    trace_alloc_max_entries: int = param(100_000, doc="GPU: allocation events kept in the CUDA memory history (the oldest are dropped).", ge=1, refs=[f"{_VERL}.global_tool_config.torch_memory.trace_alloc_max_entries"])
    context: str = param("all", doc="GPU: which events the history records: alloc (allocations), state (the allocator's state changes) or all.", choices=["alloc", "state", "all"], refs=[f"{_VERL}.global_tool_config.torch_memory.context"])
    stacks: str = param("all", doc="GPU: stack traces recorded per event: python, or all (Python and C++).", choices=["python", "all"], refs=[f"{_VERL}.global_tool_config.torch_memory.stacks"])


@section
class GlobalProfilerConfig:
    """Profiling of chosen RL steps: tool, steps and output directory."""

    tool: str | None = param(None, doc="torch (torch.profiler Chrome traces), torch_memory (memory per phase; a CUDA memory snapshot on GPUs; named with no steps and no role's profiler.enable: every step on every rank, as verl's snapshot after each update), nsys (NVTX ranges and a cudaProfilerApi capture range for a run started under Nsight Systems; needs an NVIDIA GPU and nsys) or npu (refused: posttrain has no Ascend support); null profiles nothing.", choices=TOOLS, refs=[f"{_VERL}.tool"])
    steps: list[int] = param(factory=list, doc="Stage-local training steps to profile (1 is the first); empty profiles none (tool torch_memory with no role enabled: every step).", ge=1, refs=[f"{_VERL}.steps", "verl:trainer.profile_steps"])
    profile_continuous_steps: bool = param(False, doc="Consecutive profiled steps share one trace per rank ([1, 2] in one, [5] in another) instead of one trace per step; continuous (not discrete) roles only.", refs=[f"{_VERL}.profile_continuous_steps"])
    save_path: str | None = param(None, doc="Directory of the traces and snapshots (a stage of `stages` writes into its own <save_path>/<stage name>); null means <stage run dir>/profile.", refs=[f"{_VERL}.save_path"])
    torch_memory: TorchMemoryConfig = param(factory=TorchMemoryConfig, doc="CUDA memory history options of tool torch_memory.")


_ONE_TOOL = "posttrain uses one profiler tool for every role: set profiler.tool"
_ONE_PATH = "posttrain writes every role's traces under one directory: set profiler.save_path"


def role_unsupported(prefix: str) -> dict[str, str]:
    """Keys of a verl role profiler with no field: the per-role tool, save path and tool options."""
    out = {f"{prefix}.tool": _ONE_TOOL, f"{prefix}.save_path": _ONE_PATH}
    for key in ("tool_config.npu.contents", "tool_config.npu.level", "tool_config.npu.analysis", "tool_config.npu.discrete"):
        out[f"{prefix}.{key}"] = "Ascend NPUs are not supported by posttrain"
    out[f"{prefix}.tool_config.torch_memory.trace_alloc_max_entries"] = "the CUDA memory history is one per process: set profiler.torch_memory"
    out[f"{prefix}.finish_hook_cmd"] = _FINISH_HOOK
    out[f"{prefix}.tool_config.precision_debugger.strict"] = _PRECISION_DEBUGGER
    for key in ("skip_first", "wait", "warmup", "active", "repeat"):
        out[f"{prefix}.tool_config.torch.schedule.{key}"] = _TORCH_SCHEDULE
    for key in ("config_path", "steps", "stages"):
        out[f"{prefix}.tool_config.precision_debugger.{key}"] = _PRECISION_DEBUGGER
    return out


_FINISH_HOOK = ("a shell command verl runs once after the last profiled step (to ship the traces off the node); posttrain runs no "
                "command of the config's: the traces are under profiler.save_path when each profiled step ends")
_TORCH_SCHEDULE = ("torch.profiler's schedule inside a profiled step (skip, wait, warm up, record, repeat); posttrain records each "
                   "profiled step whole (profiler.steps): verl's default (all 0) is accepted")
_PRECISION_DEBUGGER = ("options of verl's precision_debugger tool (msprobe's tensor dumps per step and stage); posttrain's "
                       "profiler tools are torch, torch_memory and nsys")


_NO_STACK_DEPTH = "torch's CUDA memory history has no stack-depth option (verl passes it only where torch has one)"


# Reference keys with no field, and why (read by the mapping generator and dialect loaders).
UNSUPPORTED: dict[str, str] = {
    f"{_VERL}.global_tool_config.torch_memory.kw_args": "the CUDA memory history is recorded for this worker's own GPU",
    f"{_VERL}.finish_hook_cmd": _FINISH_HOOK,
    f"{_VERL}.global_tool_config.precision_debugger.strict": _PRECISION_DEBUGGER,
    **{f"{_VERL}.global_tool_config.precision_debugger.{k}": _PRECISION_DEBUGGER for k in ("config_path", "steps", "stages")},
    **{f"verl:actor_rollout_ref.rollout.profiler.{k}": "the rollout is profiled with the actor (one hybrid worker): set actor.profiler"
       for k in ("finish_hook_cmd", "tool_config.torch.profile_token_start", "tool_config.torch.profile_token_end",
                 "tool_config.precision_debugger.config_path", "tool_config.precision_debugger.steps", "tool_config.precision_debugger.stages",
                 "tool_config.precision_debugger.strict")},
    **{f"verl:actor_rollout_ref.rollout.profiler.{k}": "the rollout is profiled with the actor (one hybrid worker): set actor.profiler"
       for k in ("enable", "all_ranks", "ranks", "tool", "save_path", "tool_config.torch.contents", "tool_config.torch.discrete")},
    **role_unsupported("verl:actor_rollout_ref.actor.profiler"),
    **role_unsupported("verl:actor_rollout_ref.ref.profiler"),
    **role_unsupported("verl:critic.profiler"),
    **role_unsupported("verl:reward_model.profiler"),
}

# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
_HOOK_RANKS = "which ranks run verl's finish_hook_cmd, which is refused"
_RELOCATE = "moves nsys reports and engine traces into verl's save_path when profiling ends; posttrain writes its traces under profiler.save_path"
NO_EFFECT: dict[str, str] = {
    **{f"verl:{prefix}.{k}": why for prefix in ("global_profiler", "actor_rollout_ref.actor.profiler", "actor_rollout_ref.ref.profiler",
                                                 "actor_rollout_ref.rollout.profiler", "critic.profiler")
       for k, why in (("finish_hook_all_ranks", _HOOK_RANKS), ("finish_hook_ranks", _HOOK_RANKS), ("relocate_results", _RELOCATE))},
    f"{_VERL}.global_tool_config.torch_memory.stack_depth": _NO_STACK_DEPTH,
    **{f"{role}.profiler.tool_config.torch_memory.stack_depth": _NO_STACK_DEPTH
       for role in ("verl:actor_rollout_ref.actor", "verl:actor_rollout_ref.ref", "verl:critic", "verl:reward_model")},
}
