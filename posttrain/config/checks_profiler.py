"""Cross-field rules of profiling (`profiler` and each role's `profiler`): a profiling setting that
would profile nothing, or settings that contradict each other, are refused rather than ignored.
What depends on the machine (a GPU, the nsys program) is checked before the stage starts
(`posttrain.trainer.profiling.check_profiler_machine`).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.access import get_path, training_kind, world_size

# The roles with a `profiler` sub-section, by their config path.
ROLE_PROFILERS = ("actor.profiler", "ref.profiler", "critic.profiler", "reward.reward_model.profiler")


def check_profiler(cfg: Any) -> list[str]:
    p = get_path(cfg, "profiler", None)
    if p is None or not hasattr(p, "tool"):
        return []
    roles = {path: get_path(cfg, path) for path in ROLE_PROFILERS if get_path(cfg, path, None) is not None}
    enabled = {path: s for path, s in roles.items() if s.enable}
    if p.tool is None:
        asked = [f"{path}.enable" for path in enabled] + (["profiler.steps"] if p.steps else [])
        return [f"{', '.join(asked)} set but profiler.tool is null, so nothing would be profiled; set profiler.tool: torch "
                "(or torch_memory, nsys), or remove them"] if asked else []
    tool = f"profiler.tool={p.tool}"
    kind = training_kind(cfg)
    if kind != "rl":
        return [f"{tool} in this {kind} stage: posttrain profiles RL steps only; set profiler.tool: null for this stage "
                "(in a multi-stage run, set profiler in the RL stage's overrides)"]
    if p.tool == "npu":
        return [f"{tool}: posttrain has no Ascend NPU support (no torch_npu backend); use profiler.tool: torch"]
    problems = []
    if every_step_memory(cfg):
        return problems  # torch_memory named alone: every step of every rank (verl's snapshot after each update)
    if not p.steps:
        problems.append(f"{tool} profiles the steps listed in profiler.steps, which is empty; list them, e.g. profiler.steps: [1, 2]")
    if not enabled:
        problems.append(f"{tool}: no role has profiler.enable, so nothing would be profiled; set actor.profiler.enable: true "
                        "(ref, critic and reward.reward_model have their own)")
    modes = {s.discrete for s in enabled.values()}
    if len(modes) > 1:
        shown = ", ".join(f"{path}.discrete={str(s.discrete).lower()}" for path, s in enabled.items())
        problems.append(f"{shown}: every role runs in each worker process and a process holds one torch profiler at a time, "
                        "so the enabled roles must agree on discrete")
    if True in modes and p.tool not in ("torch", "nsys"):
        problems.append(f"discrete applies to profiler.tool=torch (one trace per phase) or nsys (one capture range per phase), "
                        f"not {p.tool}; set discrete: false")
    if True in modes and p.profile_continuous_steps:
        problems.append("profiler.profile_continuous_steps joins steps into one whole-step trace (or capture range), discrete "
                        "writes one per phase: choose one")
    for path, s in enabled.items():
        if s.contents and p.tool != "torch":
            problems.append(f"{path}.contents {list(s.contents)} are what a torch trace records; {tool} records no such thing: remove them")
        out_of_range = [r for r in s.ranks if r >= world_size(cfg)]
        if out_of_range and not s.all_ranks:
            problems.append(f"{path}.ranks {out_of_range}: the run has {world_size(cfg)} worker process(es), ranks 0..{world_size(cfg) - 1}")
    return problems


def every_step_memory(cfg: Any) -> bool:
    """profiler.tool torch_memory with no profiler.steps and no role's profiler.enable: record every
    step on every rank. verl, given only global_profiler.tool=torch_memory, dumps a CUDA memory
    snapshot on every actor rank after every update (its trainer does so whatever the steps and the
    roles' enable say)."""
    p = get_path(cfg, "profiler", None)
    if p is None or getattr(p, "tool", None) != "torch_memory" or p.steps:
        return False
    return not any(get_path(cfg, path).enable for path in ROLE_PROFILERS if get_path(cfg, path, None) is not None)
