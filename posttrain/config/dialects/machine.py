"""A per-node device count that a foreign file leaves to its framework's default: this machine's.

verl's ``trainer.n_gpus_per_node`` and ROLL's ``num_gpus_per_node`` both default to 8. That number
describes the framework's reference machine, not the user's run: a file that leaves it out is run
on whatever node it is started on (ROLL's pipeline config even overwrites the value with the
platform's device count when it starts). posttrain does the same: such a file gets
``cluster.n_gpus_per_node`` = the CUDA devices visible here, and one process where there are none
(the only place nothing is set, so the translation of a file on a CPU machine is unchanged). A count
the file names is kept as written.

The translation records what it took from the machine in ``Report.devices_from_machine``, so that
a size that must divide the worker processes (a Ulysses / context-parallel size) and fails only
because this machine is smaller than the user's is reported as the machine's lack
(`machine_problem`), which ``posttrain smoke`` and the corpus sweep substitute, not as a config error.
"""

from __future__ import annotations

import re
from typing import Any

#: What a problem says when the count came from this machine (smoke and the corpus sweep read it).
LEFT_TO_MACHINE = "the file leaves the device count to the machine"
NATIVE = "cluster.n_gpus_per_node"
#: What a refusal of a data path says when the path is not on this machine (the files are on the
#: user's cluster): `config convert` keeps such a path, smoke puts rows in its place.
ABSENT_DATA = "is neither a local file, a folder nor a Hugging Face dataset name"
DATA_KEYS = ("data.train_files", "data.val_files", "algorithm.mix.expert_files")


def absent_here(entry: Any) -> bool:
    """Whether a refused report entry is a data path that is only missing on this machine."""
    return (entry.status == "refused" and ABSENT_DATA in entry.reason
            and (entry.native in DATA_KEYS or str(entry.native).endswith(".episode_files")))


def visible_gpus() -> int:
    """The CUDA devices torch sees here (0 on a machine without any, or without CUDA torch)."""
    import torch

    return int(torch.cuda.device_count())


def given(ctx: Any, key: str) -> bool:
    """Whether the file names its per-node device count ``key`` (null or a number)."""
    return ctx.has(key) and ctx.get(key) is not None


def per_node(ctx: Any, key: str) -> int:
    """The devices per node the run gets: the file's ``key`` as written, else this machine's GPUs
    (0 where it has none: one process)."""
    return ctx.get(key) if given(ctx, key) else visible_gpus()


def size_to_machine(ctx: Any, key: str, framework: str, default: int) -> None:
    """A handler's body: when the file leaves ``key`` out, the native count is this machine's GPUs
    (noted in the report with the framework's ``default`` it replaces); nothing is set without GPUs."""
    if given(ctx, key):
        return
    gpus = visible_gpus()
    ctx.report.devices_from_machine, ctx.report.framework_devices_per_node = gpus, default
    if gpus > 0:
        ctx.set(NATIVE, gpus, key, f"{gpus}: this machine's GPUs ({LEFT_TO_MACHINE}; {framework}'s default {default} describes {framework}'s machine)")


_PER_WORLD = re.compile(r"^(?P<what>[\w.]+)=(?P<size>\d+) does not divide the (?P<world>\d+) worker process(?:es|\(es\))?(?: \([^)]*\))?")


def machine_problem(problem: str, gpus: int, framework_world: int) -> str:
    """A native problem "SIZE does not divide the W worker process(es)" said as what this machine
    lacks, for a run whose devices per node (``gpus``) came from the machine, when SIZE divides the
    processes the framework's default count gives (``framework_world``: the user's cluster); others
    unchanged (a size that no cluster of the file's could run is the file's to fix).

    >>> machine_problem("actor.ulysses_sequence_parallel_size=2 does not divide the 1 worker process(es) (cluster.nnodes 4 × cluster.n_gpus_per_node 0): ...", 0, 32)
    'actor.ulysses_sequence_parallel_size=2 needs a multiple of 2 worker processes; this machine gives 1 (no GPU here; the file leaves the device count to the machine)'
    >>> machine_problem("actor.ulysses_sequence_parallel_size=3 does not divide the 1 worker process(es) (...)", 0, 8)[:60]
    'actor.ulysses_sequence_parallel_size=3 does not divide the 1'
    """
    match = _PER_WORLD.match(problem)
    if not match or framework_world % int(match["size"]):
        return problem
    here = "no GPU here" if gpus == 0 else f"{gpus} GPU{'s' if gpus > 1 else ''} per node here"
    return (f"{match['what']}={match['size']} needs a multiple of {match['size']} worker processes; this machine gives "
            f"{match['world']} ({here}; {LEFT_TO_MACHINE})")


__all__ = ["LEFT_TO_MACHINE", "machine_problem", "per_node", "size_to_machine", "visible_gpus"]
