"""What a profiled rank does, as plain records the profiling driver (`posttrain.trainer.profiling`)
and the tools (`posttrain.trainer.profile_tools`) share: the plan, the tool interface, the phase ->
role table and the trace file names. Importing it imports no profiler.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from posttrain.config.sections.profiler import TorchMemoryConfig

# The role that runs each phase of the RL step (posttrain.trainer.rl); `trainer` is the driver.
PHASE_ROLE = {
    "gen": "rollout", "gen_baseline": "rollout", "reward": "reward", "old_log_prob": "actor", "ref": "ref",
    "values": "critic", "adv": "trainer", "update_critic": "critic", "update_actor": "actor", "sync": "rollout",
}


@dataclass(frozen=True)
class ProfilePlan:
    """What this rank profiles: the tool, the steps (each with the last step of its trace) and the roles."""

    tool: str
    windows: dict[int, int]
    roles: frozenset[str]
    discrete: bool
    contents: dict[str, tuple[str, ...]]  # role -> torch trace contents ("" -> every enabled role's, merged)
    out_dir: Path
    rank: int
    device: str
    memory: TorchMemoryConfig  # profiler.torch_memory (the CUDA memory history options)


class Tool(Protocol):
    """One profiling tool: a trace window over one or more steps, and a range per phase inside it."""

    def start(self, step: int) -> None: ...
    def stop(self, first: int, last: int) -> None: ...
    def phase(self, step: int, name: str) -> contextlib.AbstractContextManager: ...


def trace_name(first: int, last: int, rank: int, suffix: str) -> str:
    """`step3_rank0.json`, or `step1-2_rank1.json` for a window of consecutive steps.

    >>> trace_name(1, 2, 1, ".json")
    'step1-2_rank1.json'
    """
    steps = f"{first}" if first == last else f"{first}-{last}"
    return f"step{steps}_rank{rank}{suffix}"
