"""`cluster`: nodes, devices, processes and the Ray runtime.

With `n_gpus_per_node: 0` and one node posttrain runs every role in one process. With
`n_gpus_per_node: N` it starts N worker processes on this machine (one per GPU, or N CPU processes
joined by gloo where there is no GPU), every role colocated on every worker
(`posttrain.cluster.placement`). Several nodes, per-role device lists and Ray wait for the Ray launcher.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section

_RAY_TODO = "Ray cluster issue"


@section
class DeviceMappingConfig:
    """Which global device ids each role's workers use (ROLL's device_mapping); empty lists colocate on all devices."""

    actor: list[int] = param(factory=list, doc="Device ids of the policy-training workers.", todo="per-role device placement; Ray cluster issue", refs=["roll:actor_train.device_mapping"])
    rollout: list[int] = param(factory=list, doc="Device ids of the generation (inference-engine) workers.", todo="per-role device placement; Ray cluster issue", refs=["roll:actor_infer.device_mapping"])
    ref: list[int] = param(factory=list, doc="Device ids of the reference-policy workers.", todo="per-role device placement; Ray cluster issue", refs=["roll:reference.device_mapping"])
    critic: list[int] = param(factory=list, doc="Device ids of the critic workers.", todo="per-role device placement; Ray cluster issue", refs=["roll:critic.device_mapping"])


@section
class ClusterConfig:
    """Where the run executes."""

    nnodes: int = param(1, doc="Number of nodes.", ge=1, refs=["verl:trainer.nnodes", "trinity:cluster.node_num", "roll:num_nodes"])
    n_gpus_per_node: int = param(0, doc="Worker processes per node, one per accelerator (CPU processes where there is none); 0 runs everything in one process.", ge=0, refs=["verl:trainer.n_gpus_per_node", "trinity:cluster.gpu_per_node", "roll:num_gpus_per_node"])
    device: str = param("auto", doc="Device of the worker processes: auto (cuda when n_gpus_per_node > 0 and a GPU is present, else cpu), cpu (CPU processes even on a GPU machine) or cuda (refused without a GPU).", choices=["auto", "cpu", "cuda"], refs=["verl:trainer.device"])
    device_mapping: DeviceMappingConfig = param(factory=DeviceMappingConfig, doc="Per-role device placement.")
    env_vars: dict[str, Any] = param(factory=dict, doc="Environment variables set in every worker process (when n_gpus_per_node > 0 starts workers).", refs=["roll:system_envs"])

    ray_namespace: str | None = param(None, doc="Ray namespace of the run's actors; null means <project_name>/<experiment_name>.", todo=_RAY_TODO, refs=["trinity:ray_namespace"])
    ray_num_cpus: int | None = param(None, doc="CPUs Ray may use on the head node; null lets Ray detect them (set it under SLURM).", ge=1, todo=_RAY_TODO, refs=["verl:ray_init.num_cpus"])
    ray_timeline_file: str | None = param(None, doc="Write a Ray timeline (chrome://tracing JSON) here at the end; null writes none (Trinity's enable_ray_timeline means <run dir>/monitor/timeline.json).", todo=_RAY_TODO, refs=["verl:ray_init.timeline_json_file", "trinity:monitor.enable_ray_timeline"])
    register_timeout_s: float = param(300.0, doc="Seconds to wait for Ray workers to register before failing.", gt=0, todo=_RAY_TODO, refs=["verl:trainer.ray_wait_register_center_timeout"])
    rpc_timeout_s: float = param(3600.0, doc="Seconds a collective between worker processes may wait for a peer before the run fails (catches a hung worker).", gt=0, refs=["roll:rpc_timeout"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {
    "roll:local_rank": "set by the launcher; posttrain assigns ranks itself",
    "roll:world_size": "a role's world size is the length of its device list (cluster.device_mapping)",
}
