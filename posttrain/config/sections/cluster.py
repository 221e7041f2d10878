"""`cluster`: nodes, devices, processes and the Ray runtime.

With `n_gpus_per_node: 0` and one node posttrain runs every role in one process. Otherwise it runs
`nnodes × n_gpus_per_node` worker processes (one per GPU, or CPU processes joined by gloo where there
is no GPU), every role colocated on every worker (`posttrain.cluster.placement`): started as
subprocesses on this machine, or as Ray actors on a Ray cluster (`launcher`).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section


@section
class DeviceMappingConfig:
    """Which global device ids each role's workers use (ROLL's device_mapping); empty lists colocate on all devices.
    The actor and critic share one list 0..k-1 (k trainer workers, each hosting both); the reference
    runs on those workers too, or as a crew of processes on devices of its own (docs/scaling.md); the
    rollout engines run on the same workers, on the first m of them (the others only train), or on
    devices k..k+m-1 of their own (split: an explorer of m processes beside the trainer, docs/scaling.md)."""

    actor: list[int] = param(factory=list, doc="Device ids of the policy-training workers (0..k-1: k trainer processes).", refs=["roll:actor_train.device_mapping"])
    rollout: list[int] = param(factory=list, doc="Device ids of the generation engines: the training devices (colocated), their first m (only those m workers generate), or the m devices after them (split placement: an explorer of m processes, one engine each, beside the trainer).", refs=["roll:actor_infer.device_mapping", "trinity:explorer.rollout_model.engine_num"])
    ref: list[int] = param(factory=list, doc="Device ids of the reference policy: the actor's (each trainer worker hosts it), or devices apart from the rollout's, either apart from the actor's or some of them (a reference crew: one process per device, sharing a device with the trainer worker there, asked for each step's log-probs).", refs=["roll:reference.device_mapping"])
    critic: list[int] = param(factory=list, doc="Device ids of the critic workers.", refs=["roll:critic.device_mapping"])


@section
class ClusterConfig:
    """Where the run executes."""

    nnodes: int = param(1, doc="Number of nodes.", ge=1, refs=["verl:trainer.nnodes", "trinity:cluster.node_num", "roll:num_nodes"])
    n_gpus_per_node: int = param(0, doc="Worker processes per node, one per accelerator (CPU processes where there is none); 0 runs everything in one process.", ge=0, refs=["verl:trainer.n_gpus_per_node", "trinity:cluster.gpu_per_node", "roll:num_gpus_per_node"])
    device: str = param("auto", doc="Device of the worker processes: auto (cuda when n_gpus_per_node > 0 and a GPU is present, else cpu), cpu (CPU processes even on a GPU machine) or cuda (refused without a GPU).", choices=["auto", "cpu", "cuda"], refs=["verl:trainer.device"])
    device_mapping: DeviceMappingConfig = param(factory=DeviceMappingConfig, doc="Per-role device placement.")
    env_vars: dict[str, Any] = param(factory=dict, doc="Environment variables set in every worker process (when n_gpus_per_node > 0 starts workers).", refs=["roll:system_envs"])

    launcher: str = param("auto", doc="What starts the worker processes when there are several: local (subprocesses of this command, one node), ray (Ray actors in placement-group bundles, one per device: an embedded local Ray cluster, or the cluster at ray_address / RAY_ADDRESS), auto (ray when nnodes > 1 or a Ray address is given, else local).", choices=["auto", "local", "ray"])
    ray_address: str | None = param(None, doc="Address of a running Ray cluster to join (as `ray start --head` prints, or auto); null uses the RAY_ADDRESS environment variable, and without it starts an embedded local cluster.", refs=["trinity:cluster.ray_address"])
    ray_namespace: str | None = param(None, doc="Ray namespace of the run's actors; null means posttrain/<run directory name>.", refs=["trinity:ray_namespace"])
    ray_num_cpus: int | None = param(None, doc="CPUs the embedded local Ray cluster may use; null lets Ray detect them (set it under SLURM). Refused with a ray_address: a running cluster has its own.", ge=1, refs=["verl:ray_init.num_cpus"])
    ray_timeline_file: str | None = param(None, doc="Write the Ray timeline (chrome://tracing JSON) of the run here at the end; null writes none (Trinity's enable_ray_timeline means <run dir>/monitor/timeline.json).", refs=["verl:ray_init.timeline_json_file", "trinity:monitor.enable_ray_timeline"])
    register_timeout_s: float = param(300.0, doc="Seconds to wait for Ray to place every worker (free CPUs/GPUs for each bundle) before failing with what was asked.", gt=0, refs=["verl:trainer.ray_wait_register_center_timeout"])
    rpc_timeout_s: float = param(3600.0, doc="Seconds a collective between worker processes may wait for a peer before the run fails (catches a hung worker).", gt=0, refs=["roll:rpc_timeout", "verl:actor_rollout_ref.nccl_timeout"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {
    "roll:local_rank": "set by the launcher; posttrain assigns ranks itself",
    # verl 0.10 (checked against its source)
    "verl:trainer.v1": ("verl 0.10's V1 trainer loop: its trainer_mode (colocate_async, separate_async) and replay-buffer sampler; "
                        "posttrain's synchronous step is trainer_mode sync, its decoupled explorer/trainer is mode: decoupled (docs/async.md)"),
    "verl:skip": "verl 0.10's rollout cache (replaying dumped rollouts at given steps, for debugging); posttrain generates every step",
}
NO_EFFECT: dict[str, str] = {
    "verl:trainer.use_v1": "which of verl 0.10's two trainer loops runs (V1, over its TransferQueue, or V0); posttrain has one",
    "verl:transfer_queue": "verl 0.10's TransferQueue, the store its V1 trainer moves batches through (where they travel, not what they hold)",
}
