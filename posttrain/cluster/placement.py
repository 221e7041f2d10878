"""How many worker processes a config asks for, and on which device.

verl's `trainer.nnodes` × `trainer.n_gpus_per_node` (posttrain's `cluster.*`) is the world: one
worker process per device, every role colocated on every worker (verl's hybrid engine). On a
machine without GPUs each "device" is a CPU process, so `cluster.n_gpus_per_node=2` runs two
workers joined by gloo. `n_gpus_per_node: 0` is one process and no torch.distributed at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posttrain.errors import ConfigError


@dataclass(frozen=True)
class WorldPlan:
    size: int  # worker processes
    device: str  # "cpu" or "cuda"


def plan_world(cfg) -> WorldPlan:
    """The workers `cfg.cluster` asks for; refuses placements this machine or posttrain cannot give."""
    c = cfg.cluster
    if c.nnodes > 1:
        raise ConfigError(
            f"cluster.nnodes={c.nnodes}: posttrain starts worker processes on this machine only (the Ray "
            "launcher for several nodes is not built yet); set cluster.nnodes=1"
        )
    size = max(1, c.nnodes * c.n_gpus_per_node)
    cuda = torch.cuda.is_available()
    if c.device == "cuda" and not cuda:
        raise ConfigError("cluster.device=cuda, but torch sees no CUDA device on this machine; use auto or cpu")
    device = "cuda" if c.device == "cuda" or (c.device == "auto" and cuda and c.n_gpus_per_node > 0) else "cpu"
    if device == "cuda" and size > torch.cuda.device_count():
        raise ConfigError(
            f"cluster.n_gpus_per_node={c.n_gpus_per_node} asks for {size} GPUs, but this machine has "
            f"{torch.cuda.device_count()}; lower it (or set cluster.device=cpu to run {size} CPU processes)"
        )
    return WorldPlan(size, device)
