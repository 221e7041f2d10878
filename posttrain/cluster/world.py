"""This process's place in a run: one process (`World()`), or rank r of N worker processes.

posttrain runs SPMD: every worker process runs the same stage loop on the same batches, and the
roles inside it share the work through a `DataParallel` (`posttrain.cluster.parallel`). The launcher
(`posttrain.cluster.launch`) starts the workers and tells each its rank through the environment;
`join_world` then connects them with torch.distributed (gloo on CPU, NCCL between GPUs).

Only rank 0 writes shared files (metrics, checkpoints, the final model); every rank takes part in
the collectives that gather what it writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from posttrain.cluster import RANK_ENV, WORLD_ENV
from posttrain.cluster.parallel import DataParallel
from posttrain.errors import ConfigError
from posttrain.models.ulysses import SequenceGroup, ulysses_unsupported_reason


@dataclass(frozen=True)
class World:
    """Rank and size of this run's worker processes, and the device each computes on."""

    rank: int = 0
    size: int = 1
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        """The process that writes the run's files and prints its progress."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def data_parallel(self, balance: bool = True, sp: int = 1) -> DataParallel:
        """Every rank as one data-parallel group (all roles share every process), or with `sp` > 1 a
        dp x sp grid (`posttrain.cluster.parallel`): ranks r with the same r // sp hold the same rows
        and split each sequence between them (Ulysses), ranks with the same r % sp are a
        data-parallel group. Every rank must call this alike: it creates process groups."""
        if sp == 1:
            if self.size == 1:
                return DataParallel(balance=balance)
            return DataParallel(self.rank, self.size, dist.group.WORLD, balance)
        if self.size % sp:
            raise ConfigError(
                f"ulysses_sequence_parallel_size={sp} does not divide the {self.size} worker process(es); "
                f"use a divisor of {self.size}, or as many worker processes as a multiple of {sp}"
            )
        dp = self.size // sp
        # new_group is itself a collective: every rank creates every group, in the same order.
        seq_groups = [dist.new_group(list(range(d * sp, (d + 1) * sp))) for d in range(dp)]
        dp_groups = [dist.new_group(list(range(s, self.size, sp))) for s in range(sp)] if dp > 1 else []
        seq = SequenceGroup(self.rank % sp, sp, seq_groups[self.rank // sp])
        if dp == 1:
            return DataParallel(balance=balance, seq=seq)
        return DataParallel(self.rank // sp, dp, dp_groups[self.rank % sp], balance, seq)

    @property
    def torch_device(self) -> torch.device:
        """The device this worker computes on (its own GPU, or the CPU)."""
        if self.device == "cuda":
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", self.rank)))
        return torch.device("cpu")

    def shard(self, model: torch.nn.Module, fsdp_config: Any) -> torch.nn.Module:
        """`model` sharded over every rank with FSDP2 as the role's `fsdp_config` asks (its root
        runs the role's forwards: `posttrain.cluster.fsdp.shard_model`); unchanged in one process."""
        if self.size == 1:
            return model
        from posttrain.cluster.fsdp import role_mesh, shard_model, sharding_settings

        mesh = role_mesh(self.device, self.size, fsdp_config.fsdp_size)
        return shard_model(model, mesh, sharding_settings(fsdp_config))

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def from_main(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (a decision only the writer can make)."""
        if self.size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def role_parallelism(world: World, balance: bool) -> Callable[[Any, str, int], DataParallel]:
    """`dp(model, role, sp)`: a role's data parallelism, with its sequences split over `sp` ranks
    (Ulysses: `posttrain.models.ulysses`) when sp > 1. Roles of one size share their process groups;
    a model the split cannot run is refused, naming the role's key."""
    made: dict[int, DataParallel] = {}

    def dp(model: Any, role: str, sp: int) -> DataParallel:
        if sp > 1:
            reason = ulysses_unsupported_reason(model, sp)
            if reason is not None:
                raise ConfigError(
                    f"{role}.ulysses_sequence_parallel_size={sp}: the forward that splits each sequence cannot run "
                    f"this model ({reason}); set it to 1"
                )
        if sp not in made:
            made[sp] = world.data_parallel(balance, sp)
        return made[sp]

    return dp


def world_from_env() -> World | None:
    """The World a launcher assigned to this process, or None when it was not started by one."""
    if RANK_ENV not in os.environ:
        return None
    rank, size = int(os.environ[RANK_ENV]), int(os.environ[WORLD_ENV])
    device = "cuda" if torch.cuda.is_available() and os.environ.get("POSTTRAIN_DEVICE", "cpu") == "cuda" else "cpu"
    return World(rank, size, device)


def join_world(world: World, timeout_s: float) -> None:
    """Connect to the other workers (MASTER_ADDR/MASTER_PORT from the launcher). A collective that
    waits longer than `timeout_s` for a peer fails, so a hung worker ends the run."""
    if world.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", world.rank)))
    backend = "nccl" if world.device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=world.rank, world_size=world.size, timeout=timedelta(seconds=timeout_s))


def leave_world(world: World) -> None:
    """Wait for every rank, then close the process group (a peer leaving mid-collective aborts the others)."""
    if world.size > 1 and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
