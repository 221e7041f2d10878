"""Starting the worker processes as Ray actors: one per device, on one machine or many.

The same SPMD workers as `posttrain.cluster.launch`, started by Ray instead of as subprocesses:
Ray places one bundle per worker ({"CPU": 1}, plus {"GPU": 1} on GPUs) in a placement group
(packed onto as few nodes as fit), each actor learns its rank from the environment set here and
runs the same `posttrain train ...` command line in its own process, joined to the others by
torch.distributed at rank 0's node address. Ray is only the process manager: the training step,
its collectives and its checkpoints are the ones a local run uses.

On a cluster: `ray start --head` on one node, `ray start --address=<head>:6379` on the others, and
the unchanged `posttrain train CONFIG ...` on the head with `cluster.ray_address` (or RAY_ADDRESS)
set. Every node needs posttrain installed and the config's paths (model, data, run directory)
reachable at the same place: a shared filesystem. Without an address Ray starts an embedded local
cluster for the run and stops it at the end.

A worker that dies (SIGKILL, out of memory, an exception) or hangs is reported as for local workers
(`posttrain.cluster.launch.watch`): Ray tells which actor died; the hang is caught by its peers'
collective timeout.

A run whose sglang engine spans several worker processes' GPUs (rollout.tensor_model_parallel_size
above 1, `posttrain.rollout.sglang_engine`) needs each group's first process to see the group's
GPUs and to open the others' CUDA IPC handles. Its actors are started with Ray's
RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES, so each sees its node's GPUs as the local launcher's
workers do and takes the one Ray gave it (LOCAL_RANK); ranks then follow nodes and GPUs in order, so
that consecutive ranks sit on one node's consecutive GPUs.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any, Callable

from posttrain.cluster.launch import ROLES, watch, worker_env
from posttrain.cluster.placement import WorldPlan
from posttrain.cluster.process_logs import log_paths
from posttrain.errors import ConfigError

KILLED = -9  # what a dead actor's exit status reads as (Ray does not report the signal)
# Ray leaves CUDA_VISIBLE_DEVICES alone in a worker whose environment sets this (ray._private.accelerators.nvidia_gpu)
NOSET = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


def visible_index(gpu_id: str, visible: str | None) -> int | None:
    """The index among the devices a process sees of the GPU Ray calls `gpu_id`: Ray's ids are the
    node's CUDA_VISIBLE_DEVICES entries when it was set where Ray started (`visible`), else indices;
    None when `visible` does not show it."""
    if not visible:
        return int(gpu_id)
    entries = [v.strip() for v in visible.split(",")]
    return entries.index(gpu_id) if gpu_id in entries else None


class RankWorker:
    """One worker process (a Ray actor; `ray.remote` is applied at launch, so importing this module
    needs no Ray)."""

    def address(self) -> tuple[str, int]:
        """This node's IP address and a free port on it (rank 0's becomes the rendezvous)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), s.getsockname()[1]

    def gpu(self) -> tuple[list[str], str | None, int | None]:
        """The GPUs Ray gave this process, its CUDA_VISIBLE_DEVICES, and the index of the first among
        the GPUs it sees (None when those do not show it)."""
        import ray

        ids, visible = [str(i) for i in ray.get_gpu_ids()], os.environ.get("CUDA_VISIBLE_DEVICES")
        return ids, visible, visible_index(ids[0], visible) if ids else None

    def run(self, entry: Callable[[list[str]], int], argv: list[str], env: dict[str, str], cwd: str, log: str, console: bool) -> int:
        """`entry(argv)` -- the `posttrain` command's main, which the command line hands down so that
        this layer never imports it -- in this process; error output (and all output unless
        `console`) to `log`."""
        os.environ.update(env)
        if os.path.isdir(cwd):  # relative paths of the config mean the same as on the head node
            os.chdir(cwd)
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 2)
        if not console:
            os.dup2(fd, 1)
        try:
            code = entry(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        return int(code or 0)


class ActorProcess:
    """A Ray worker seen as a process (poll/returncode/send_signal/wait/kill) by the launcher's watch."""

    def __init__(self, ray, actor, ref):
        self.ray, self.actor, self.ref = ray, actor, ref
        self.returncode: int | None = None
        self.how: str | None = None  # how it ended, in Ray's words, when Ray says

    def poll(self) -> int | None:
        if self.returncode is None:
            done, _ = self.ray.wait([self.ref], timeout=0)
            if done:
                self.returncode = self._outcome()
        return self.returncode

    def _outcome(self) -> int:
        try:
            return int(self.ray.get(self.ref))
        except self.ray.exceptions.RayActorError as err:  # the process died: SIGKILL, the OOM killer
            self.how = "died (" + (str(err).strip().splitlines() or ["no reason given"])[0][:200] + ")"
            return KILLED
        except self.ray.exceptions.RayTaskError:  # an exception escaped the worker (its log has it)
            return 1

    def send_signal(self, sig: int) -> None:
        self.ray.kill(self.actor, no_restart=True)

    kill = terminate = send_signal

    def wait(self, timeout: float | None = None) -> int | None:
        self.ray.wait([self.ref], timeout=timeout)
        if self.poll() is None:
            self.returncode = KILLED  # killed by us: ray.kill ends the task without a result
        return self.returncode


def check_answers(address: str, timeout_s: float = 10.0) -> None:
    """Refuse a Ray address whose host:port does not accept a connection (Ray itself would retry
    for minutes). `auto` and `ray://` client addresses are left to Ray."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or address.startswith("ray://") or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ConfigError(
            f"cluster.ray_address (or RAY_ADDRESS) {address}: nothing answers there ({err.strerror or err}); start the "
            "cluster with `ray start --head` and give the address it prints, or leave it unset for a local cluster"
        ) from None


def bundle_of(device: str, gpus: int = 1) -> dict[str, int]:
    """The placement-group bundle of one worker: a CPU, and on CUDA its `gpus` GPUs (on one node; Ray
    shows the actor those GPUs alone, from index 0)."""
    return {"CPU": 1, **({"GPU": gpus} if device == "cuda" else {})}


def launch_ray(entry: Callable[[list[str]], int], argv: list[str], plan: WorldPlan, run_dir: Path, cluster, log: Any = None,
               roles: str = ROLES, log_name: str = "rank", gpus: int = 1, node_gpus: bool = False) -> int:
    """Run `entry(argv)` (the `posttrain` command's main, given by the command line) as `plan.size`
    Ray actors hosting `roles`, logging to `<log_name><rank>.log`; returns the launcher's exit status.
    On CUDA each actor holds `gpus` GPUs (an explorer process's engine over several: rollout.tensor_model_parallel_size);
    with `node_gpus` each sees its node's GPUs and uses its own (module docstring)."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "cluster.launcher=ray (or a Ray address, or cluster.nnodes > 1) needs Ray: pip install 'posttrain[ray]'"
        ) from None
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if plan.ray_address:
        check_answers(plan.ray_address)
    namespace = cluster.ray_namespace or f"posttrain/{run_dir.name}"
    try:
        ray.init(address=plan.ray_address, namespace=namespace, num_cpus=cluster.ray_num_cpus,
                 include_dashboard=False, log_to_driver=True, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ConfigError(f"cluster.ray_address {plan.ray_address!r}: cannot join that Ray cluster ({err}); start it with `ray start --head` or fix the address") from None
    bundle = bundle_of(plan.device, gpus)
    group = placement_group([bundle] * plan.size, strategy="PACK")
    try:
        try:
            ray.get(group.ready(), timeout=cluster.register_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"Ray could not place {plan.size} workers of {bundle} within cluster.register_timeout_s="
                f"{cluster.register_timeout_s:g} s; the cluster has {ray.cluster_resources()}. Lower the worker count "
                "(cluster.nnodes × n_gpus_per_node) or add nodes"
            ) from None
        return _run_actors(ray, group, bundle, entry, argv, plan, run_dir, cluster, PlacementGroupSchedulingStrategy, log, roles,
                           log_name, node_gpus and plan.device == "cuda")
    finally:
        remove_placement_group(group)
        if cluster.ray_timeline_file:
            ray.timeline(filename=str(Path(cluster.ray_timeline_file).expanduser()))
        ray.shutdown()


def _run_actors(ray, group, bundle: dict[str, int], entry, argv, plan: WorldPlan, run_dir: Path, cluster, strategy, log: Any = None,
                roles: str = ROLES, log_name: str = "rank", node_gpus: bool = False) -> int:
    remote = ray.remote(RankWorker)
    seen = {"runtime_env": {"env_vars": {NOSET: "1"}}} if node_gpus else {}
    actors = [
        remote.options(num_cpus=1, num_gpus=bundle.get("GPU", 0), **seen,
                       scheduling_strategy=strategy(placement_group=group, placement_group_bundle_index=i)).remote()
        for i in range(plan.size)
    ]
    addresses = ray.get([a.address.remote() for a in actors])
    gpus: list[int | None] = [None] * plan.size
    if node_gpus:  # ranks by node, then by GPU: a group of consecutive ranks is one node's consecutive GPUs
        for i, (ids, visible, index) in enumerate(ray.get([a.gpu.remote() for a in actors])):
            if index is None:
                raise ConfigError(f"Ray gave a worker GPU(s) {ids}, which its CUDA_VISIBLE_DEVICES={visible} does not show; the sglang "
                                  "engine's processes must see their node's GPUs: start the Ray node with the CUDA_VISIBLE_DEVICES its workers see")
            gpus[i] = index
        nodes = list(dict.fromkeys(ip for ip, _ in addresses))
        order = sorted(range(plan.size), key=lambda i: (nodes.index(addresses[i][0]), gpus[i]))
        actors, addresses, gpus = [actors[i] for i in order], [addresses[i] for i in order], [gpus[i] for i in order]
    # Ranks in bundle order (PACK fills a node before the next); on a GPU each actor sees only its
    # own device (Ray sets CUDA_VISIBLE_DEVICES), so its local device index is 0, unless it sees its
    # node's GPUs (node_gpus): then the one Ray gave it.
    local = [sum(ip == addresses[r][0] for ip, _ in addresses[:r]) for r in range(plan.size)]
    logs = log_paths(log, run_dir.resolve(), [f"{log_name}{r}" for r in range(plan.size)], [ip for ip, _ in addresses])
    log_dir = logs[0].parent if not getattr(log, "group_by_node", False) else logs[0].parent.parent
    refs = []
    for rank, actor in enumerate(actors):
        # actors do not inherit this process's environment on a running cluster: forward posttrain's own
        forwarded = {k: v for k, v in os.environ.items() if k.startswith("POSTTRAIN_")}
        device = (gpus[rank] if node_gpus else 0) if plan.device == "cuda" else local[rank]
        env = worker_env(rank, plan.size, device, addresses[0], plan.device,
                         {**forwarded, **cluster.env_vars}, threads=None)
        refs.append(actor.run.remote(entry, argv, env, os.getcwd(), str(logs[rank]), rank == 0))
    nodes = len({ip for ip, _ in addresses})
    print(f"posttrain: {plan.size} Ray workers on {plan.device} across {nodes} node(s) ({', '.join(sorted({ip for ip, _ in addresses}))}), "
          f"Ray namespace {ray.get_runtime_context().namespace}; each hosts {roles}; logs in {log_dir}", flush=True)
    return watch([ActorProcess(ray, a, ref) for a, ref in zip(actors, refs)], logs, roles=roles)
