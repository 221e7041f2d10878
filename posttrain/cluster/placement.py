"""How many worker processes a config asks for, on which device, and what starts them.

verl's `trainer.nnodes` × `trainer.n_gpus_per_node` (posttrain's `cluster.*`) is the world: one
worker process per device, every role colocated on every worker (verl's hybrid engine). On a
machine without GPUs each "device" is a CPU process, so `cluster.n_gpus_per_node=2` runs two
workers joined by gloo. `n_gpus_per_node: 0` is one process and no torch.distributed at all.

ROLL's per-role `device_mapping` says the same thing another way: when every role lists the same
devices 0..k-1 (ROLL's colocated layout, `list(range(0,8))` for each worker), the world is those k
devices (`posttrain.config.access.world_size`; roles on different devices are refused at load time).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from posttrain.config.access import launcher as launcher_of, world_size
from posttrain.errors import ConfigError

RAY_KEYS = {"ray_namespace": None, "ray_num_cpus": None, "ray_timeline_file": None, "register_timeout_s": 300.0}


@dataclass(frozen=True)
class WorldPlan:
    size: int  # worker processes
    device: str  # "cpu" or "cuda"
    launcher: str  # "local" (subprocesses of this command) or "ray"
    ray_address: str | None = None  # a running Ray cluster to join; None starts an embedded one


def plan_world(cfg) -> WorldPlan:
    """The workers `cfg.cluster` asks for; refuses placements this machine or posttrain cannot give."""
    c = cfg.cluster
    size = world_size(cfg)  # checked at load time: a colocated device_mapping, or nodes × devices
    address = c.ray_address or os.environ.get("RAY_ADDRESS") or None
    launcher = launcher_of(cfg)
    _check_launcher(c, size, launcher, address)
    cuda = torch.cuda.is_available()
    if c.device == "cuda" and not cuda:
        raise ConfigError("cluster.device=cuda, but torch sees no CUDA device on this machine; use auto or cpu")
    device = "cuda" if c.device == "cuda" or (c.device == "auto" and cuda and c.n_gpus_per_node > 0) else "cpu"
    per_node = -(-size // c.nnodes)
    if device == "cuda" and launcher == "local" and per_node > torch.cuda.device_count():
        raise ConfigError(
            f"cluster.n_gpus_per_node={c.n_gpus_per_node} asks for {per_node} GPUs on this machine, but it has "
            f"{torch.cuda.device_count()}; lower it (or set cluster.device=cpu to run {size} CPU processes)"
        )
    return WorldPlan(size, device, launcher if size > 1 else "local", address if launcher == "ray" else None)


def _check_launcher(c, size: int, launcher: str, address: str | None) -> None:
    if launcher == "local" and c.nnodes > 1:
        raise ConfigError(
            f"cluster.nnodes={c.nnodes} with cluster.launcher=local: subprocesses run on this machine only; use "
            "cluster.launcher=ray (or auto) on a Ray cluster, or set cluster.nnodes=1"
        )
    if launcher == "ray" and size > 1:
        if c.ray_num_cpus is not None and address:
            raise ConfigError(
                f"cluster.ray_num_cpus={c.ray_num_cpus} sizes an embedded Ray cluster, but the run joins the one at "
                f"{address}, which has its own CPUs; remove ray_num_cpus or the address"
            )
        return
    changed = [f"cluster.{k}" for k, default in RAY_KEYS.items() if getattr(c, k) != default]
    if c.ray_address:
        changed.append("cluster.ray_address")
    if changed:
        why = "this run has one process" if size == 1 else "its workers are started as local subprocesses (cluster.launcher=local)"
        raise ConfigError(f"{', '.join(changed)}: only act when Ray starts the workers, and {why}; remove them or set cluster.launcher=ray")
