"""Running a function on N local processes joined by a gloo process group, for tests.

`run_ranks(fn, world, *args)` starts `world` processes, each calling `fn(rank, world, *args)` inside
an initialised default process group, and returns their results in rank order. `fn` must be a
module-level function of an importable test module (it is pickled by name).

The processes are forked from multiprocessing's fork server, which imports torch, transformers and
the posttrain modules these tests use once per test process (a fresh interpreter per rank spent ~5
CPU-seconds importing them). The server runs no torch operation, so no OpenMP pool crosses a fork.
"""

from __future__ import annotations

import io
import os
import queue as queue_module
import time
import traceback

import torch
import torch.multiprocessing as mp

from posttrain.cluster.launch import free_port


def _entry(rank: int, world: int, port: int, fn, args, queue) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = io.BytesIO()
        torch.save(fn(rank, world, *args), result)  # bytes: tensors sent as shared memory die with this process
        queue.put((rank, "ok", result.getvalue()))
    except BaseException:  # report it to the parent instead of hanging the other ranks' collectives
        queue.put((rank, "error", traceback.format_exc()))
        raise
    finally:
        dist.barrier()  # gloo aborts a process whose peer exits while it still talks to it
        dist.destroy_process_group()


PRELOAD = ["torch", "torch.distributed", "torch.distributed.fsdp", "transformers", "posttrain.cluster.fsdp",
           "posttrain.cluster.world", "posttrain.workers", "posttrain.rollout.hf_engine", "dist_harness"]


def run_ranks(fn, world: int, *args, timeout: float = 180.0) -> list:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the server starts: the first call in this process
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world:
            try:
                rank, status, value = queue.get(timeout=1.0)
            except queue_module.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in results]
                if dead:
                    raise AssertionError(f"rank {dead[0][0]} died with exit code {dead[0][1]} before reporting")
                if time.monotonic() > deadline:
                    raise AssertionError(f"ranks {sorted(set(range(world)) - set(results))} gave no result in {timeout} s")
                continue
            if status == "error":
                raise AssertionError(f"rank {rank} failed:\n{value}")
            results[rank] = torch.load(io.BytesIO(value), weights_only=False)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]
