"""Which steps, roles and ranks are profiled (`profiler`, `<role>.profiler`), and the driver of
the chosen tool around the RL step and its phases.

This module imports no profiler: `StepProfiler.build` returns None when the config profiles nothing
on this rank, and the tools (`posttrain.trainer.profile_tools`, which imports torch.profiler) are
only imported when one is needed. With profiling off a step makes no profiler object, no range and
no device synchronisation: the trainer's `PhaseTimer` holds no profiler and times as before.

The RL step's phases belong to roles (`posttrain.trainer.profile_plan.PHASE_ROLE`). Every worker hosts every role, so a whole-step
("continuous") trace covers them all; discrete traces are per phase, for the roles that asked.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Iterator

from posttrain.config.access import get_path
from posttrain.config.checks_profiler import ROLE_PROFILERS, every_step_memory
from posttrain.config.schema import Config
from posttrain.config.sections.profiler import ProfilerConfig
from posttrain.errors import ConfigError
from posttrain.trainer.profile_plan import ProfilePlan, Tool

def role_settings(cfg: Config) -> dict[str, ProfilerConfig]:
    """Each profiled role's settings; the rollout follows the actor's (verl's hybrid worker)."""
    return {"actor": cfg.actor.profiler, "rollout": cfg.actor.profiler, "ref": cfg.ref.profiler,
            "critic": cfg.critic.profiler, "reward": cfg.reward.reward_model.profiler}


def check_profiler_machine(cfg: Config, device: str) -> None:
    """What the profiler needs from this machine, before a stage starts: nsys needs an NVIDIA GPU
    and the nsys program; a trace of GPU kernels (contents: cuda) needs a GPU."""
    tool = cfg.profiler.tool
    if tool == "nsys" and device != "cuda":
        raise ConfigError("profiler.tool=nsys: Nsight Systems traces NVIDIA GPUs, and this run computes on the CPU; use profiler.tool: torch")
    if tool == "nsys" and shutil.which("nsys") is None:
        raise ConfigError("profiler.tool=nsys: the nsys program (Nsight Systems) is not on PATH on this machine; install it "
                          "and start the run under `nsys profile --capture-range=cudaProfilerApi`, or use profiler.tool: torch")
    if tool == "torch" and device != "cuda":
        asked = [path for path in ROLE_PROFILERS if get_path(cfg, path).enable and "cuda" in get_path(cfg, path).contents]
        if asked:
            shown = " and ".join(f"{path}.contents" for path in asked)
            raise ConfigError(f"{shown}: cuda traces GPU kernels, and this run computes on the CPU; remove cuda "
                              "(cpu is recorded by default)")


def selects(settings: ProfilerConfig, rank: int) -> bool:
    """Whether a role's settings profile `rank`: all_ranks, the listed ranks, else rank 0 (verl's rule)."""
    if not settings.enable:
        return False
    if settings.all_ranks:
        return True
    return rank in settings.ranks if settings.ranks else rank == 0


def trace_windows(steps: list[int], continuous: bool) -> dict[int, int]:
    """Each profiled step -> the last step of its trace: itself, or with `continuous` the end of its
    run of consecutive steps.

    >>> trace_windows([5, 1, 2], continuous=True)
    {1: 2, 2: 2, 5: 5}
    >>> trace_windows([1, 2], continuous=False)
    {1: 1, 2: 2}
    """
    out: dict[int, int] = {}
    ordered = sorted(set(steps))
    for i, step in enumerate(ordered):
        end = step
        if continuous:
            while end + 1 in ordered[i:]:
                end += 1
        out[step] = end
    return out


def profile_plan(cfg: Config, rank: int, run_dir: Path, device: str, stage: str = "main", total_steps: int = 0) -> ProfilePlan | None:
    """This rank's plan, or None when it profiles nothing (no tool, no steps or no role on this rank).
    Files go to `<run_dir>/profile`, or to save_path (`<save_path>/<stage name>` for a stage of `stages`,
    so that stages do not overwrite each other's files). torch_memory named alone (`every_step_memory`)
    records steps 1..total_steps on every rank, every role's phases."""
    p = cfg.profiler
    steps = list(p.steps)
    settings = {role: s for role, s in role_settings(cfg).items() if selects(s, rank)}
    if every_step_memory(cfg):
        steps, settings = list(range(1, total_steps + 1)), role_settings(cfg)
    if p.tool is None or not steps or not settings:
        return None
    discrete = any(s.discrete for s in settings.values())  # the checks make enabled roles agree
    contents = {role: tuple(s.contents) for role, s in settings.items()}
    contents[""] = tuple(sorted({c for s in settings.values() for c in s.contents}))
    out = run_dir / "profile" if not p.save_path else Path(p.save_path) / (stage if stage != "main" else "")
    windows = trace_windows(steps, p.profile_continuous_steps and not discrete)
    return ProfilePlan(p.tool, windows, frozenset(settings), discrete, contents, out, rank, device, p.torch_memory)


class StepProfiler:
    """Opens and closes the chosen tool's window around profiled steps and marks each phase."""

    def __init__(self, plan: ProfilePlan, tool: Tool):
        self.plan, self.tool = plan, tool
        self.current: int | None = None  # the step being profiled
        self.opened: int | None = None  # first step of the open window

    @classmethod
    def build(cls, cfg: Config, rank: int, run_dir: Path, device: str, stage: str, total_steps: int) -> StepProfiler | None:
        """This rank's profiler, or None; refuses steps the stage does not have (on every rank alike)."""
        beyond = [s for s in cfg.profiler.steps if s > total_steps] if cfg.profiler.tool is not None else []
        if beyond:
            raise ConfigError(f"profiler.steps {beyond}: stage {stage} has {total_steps} training step(s); "
                              f"profile steps 1..{total_steps}")
        plan = profile_plan(cfg, rank, run_dir, device, stage, total_steps)
        if plan is None:
            return None
        from posttrain.trainer.profile_tools import make_tool  # torch.profiler only when profiling

        return cls(plan, make_tool(plan))

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Profile `step` when it is chosen: open a window (unless one is open), close it at the
        window's last step (a resumed run opens it at its first step still to run)."""
        if step not in self.plan.windows:
            yield
            return
        if self.opened is None:
            self.tool.start(step)
            self.opened = step
        self.current = step
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            self.current = None
            if failed or self.plan.windows[step] == step:
                first, self.opened = self.opened, None
                self.tool.stop(first, step)

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        """The tool's range for phase `name` of the profiled step; nothing outside profiled steps."""
        if self.current is None:
            return contextlib.nullcontext()
        return self.tool.phase(self.current, name)
