"""Read-only accessors of a config that the cross-field rules (`posttrain.config.checks` and its
companions) and the stages share: a dotted path with a default, the training kind, the worker count.
They work on any object with the attributes they read (schemas of tests too), and import nothing of
posttrain, so every checks module can import them without a circle.
"""

from __future__ import annotations

import os
from typing import Any

_ABSENT = object()


def get_path(cfg: Any, path: str, default: Any = _ABSENT) -> Any:
    """``cfg.a.b.c`` for ``"a.b.c"``, or ``default`` when some part does not exist."""
    node = cfg
    for part in path.split("."):
        node = getattr(node, part, _ABSENT)
        if node is _ABSENT:
            return default
    return node


MAPPED_ROLES = ("actor", "rollout", "ref", "critic")  # the roles cluster.device_mapping places
TRAINING_ROLES = ("actor", "ref", "critic")  # the roles every trainer rank hosts


def device_lists(cfg: Any) -> dict[str, list[int]]:
    """The non-empty device lists of cluster.device_mapping, by role."""
    lists = {role: list(get_path(cfg, f"cluster.device_mapping.{role}", None) or []) for role in MAPPED_ROLES}
    return {role: ids for role, ids in lists.items() if ids}


def reference_crew_devices(cfg: Any) -> list[int] | None:
    """cluster.device_mapping.ref when it names devices apart from the trainer's (the actor's, else
    the critic's list) or only some of them: the reference then runs as processes of its own, one per
    device (the reference crew, `posttrain.trainer.reference_crew`), not on the trainer workers; on
    some of the trainer's devices, its processes share them with those trainer workers (ROLL's layout
    that holds the reference on the devices its engines leave free). None otherwise: the ref list is
    the trainer's own (or absent), or reaches beyond it, which `checks.check_device_mapping` refuses."""
    lists = device_lists(cfg)
    ref = lists.get("ref")
    return ref if devices_apart(ref, lists.get("actor") or lists.get("critic")) else None


def devices_apart(ref: list[int] | None, trainer: list[int] | None) -> bool:
    """Whether the reference's device list (both given) names devices and none of the trainer's, or
    some of the trainer's devices and no other: a reference crew of its own either way."""
    if not (ref and trainer):
        return False
    return not set(ref) & set(trainer) or set(ref) < set(trainer)


def _trainer_lists(cfg: Any) -> list[list[int]]:
    """The device lists of the roles every trainer worker hosts: the actor's, the critic's and the
    reference's unless the reference has devices of its own."""
    crew = reference_crew_devices(cfg) is not None
    return [ids for role, ids in device_lists(cfg).items() if role in TRAINING_ROLES and not (crew and role == "ref")]


def world_size(cfg: Any) -> int:
    """Worker processes of the training side: the devices the training roles' cluster.device_mapping
    lists (when given), else nodes × devices per node, or 1 process with 0 devices per node."""
    lists = device_lists(cfg)
    training = _trainer_lists(cfg)
    if training:
        return len(training[0])
    if "rollout" in lists and not get_path(cfg, "cluster.n_gpus_per_node", 0):  # the rollout's devices, no others
        return len(lists["rollout"])
    gpus = get_path(cfg, "cluster.n_gpus_per_node", 0)
    return get_path(cfg, "cluster.nnodes", 1) * gpus if gpus > 0 else 1


def launcher(cfg: Any) -> str:
    """What starts the worker processes (cluster.launcher): "local" (subprocesses of this command, on
    one node) or "ray"; auto is ray with several nodes or a Ray cluster's address (cluster.ray_address,
    or RAY_ADDRESS in the environment), else local."""
    chosen = get_path(cfg, "cluster.launcher", "auto")
    if chosen != "auto":
        return chosen
    address = get_path(cfg, "cluster.ray_address", None) or os.environ.get("RAY_ADDRESS")
    return "ray" if get_path(cfg, "cluster.nnodes", 1) > 1 or address else "local"


def role_processes(cfg: Any, role: str) -> int:
    """The processes a training role's model is spread over: the reference crew's for `ref` when it
    has devices of its own, else the trainer's worker processes."""
    crew = reference_crew_devices(cfg) if role == "ref" else None
    return len(crew) if crew else world_size(cfg)


def training_devices(cfg: Any) -> list[int] | None:
    """The devices of the training roles (one list for actor, reference and critic; without the
    reference when it runs as a crew of its own), None when cluster.device_mapping gives them none
    (then the trainer workers are devices 0..W-1)."""
    return next(iter(_trainer_lists(cfg)), None)


def rollout_placement(cfg: Any) -> str:
    """Where the rollout engines run beside the W training workers (cluster.device_mapping.rollout):
    "colocated" (on every worker: no list, or the workers' own devices), "subset" (on the first m < W
    of the workers' devices: the others only train) or "split" (on m devices of their own: an
    explorer of m processes beside a trainer of W). Other layouts are refused at load time."""
    ids = device_lists(cfg).get("rollout")
    training = training_devices(cfg) or list(range(world_size(cfg)))
    if not ids or ids == training:
        return "colocated"
    return "subset" if ids == training[:len(ids)] else "split"


# Trinity-RFT 0.5 names them explorer_driven / trainer_driven and keeps the older names as aliases
EXPLORER_DRIVEN, TRAINER_DRIVEN = ("dynamic_by_explorer", "explorer_driven"), ("dynamic_by_trainer", "trainer_driven")
DYNAMIC_SYNC = EXPLORER_DRIVEN + TRAINER_DRIVEN


def is_decoupled(cfg: Any) -> bool:
    """Whether an RL stage with this config runs as explorer and trainer processes: mode both with a
    lagging synchronizer, or with the rollout engine off the training process (verl's
    `hybrid_engine: false`, split placement: on-policy with interval 1 and offset 0)."""
    lagging = (get_path(cfg, "synchronizer.sync_interval", 1) > 1 or get_path(cfg, "synchronizer.sync_offset", 0) > 0
               or get_path(cfg, "synchronizer.sync_style", "fixed") in DYNAMIC_SYNC)
    split = not get_path(cfg, "rollout.hybrid_engine", True) or rollout_placement(cfg) == "split"
    return get_path(cfg, "algorithm.kind", "rl") == "rl" and get_path(cfg, "trainer.mode", "both") == "both" and (lagging or split)


def explores_apart(cfg: Any) -> bool:
    """Whether the rollout engines run in explorer processes of their own, a whole engine each: a
    decoupled RL stage (`is_decoupled`), or trainer.mode explore."""
    explore = get_path(cfg, "algorithm.kind", "rl") == "rl" and get_path(cfg, "trainer.mode", "both") == "explore"
    return explore or is_decoupled(cfg)


def engine_spans_workers(cfg: Any) -> bool:
    """Whether the first of every rollout.tensor_model_parallel_size consecutive worker processes runs
    the group's engine over the group's GPUs (the sglang engine, outside explorer processes), so
    that those processes must see their node's GPUs (posttrain.cluster.ray_launch)."""
    return (get_path(cfg, "rollout.name", "hf") == "sglang" and get_path(cfg, "rollout.tensor_model_parallel_size", 1) > 1
            and not explores_apart(cfg))


def engine_devices(cfg: Any, index: int) -> list[int] | None:
    """The devices of explorer engine `index`: its rollout.tensor_model_parallel_size consecutive
    entries of cluster.device_mapping.rollout; None without such a list, or where Ray starts the
    explorer processes (each actor is shown its engine's GPUs alone): the engine then takes the
    first devices its process sees."""
    ids = device_lists(cfg).get("rollout")
    if not ids or rollout_placement(cfg) == "colocated" or (launcher(cfg) == "ray" and explorer_processes(cfg) > 1):
        return None
    tp = get_path(cfg, "rollout.tensor_model_parallel_size", 1)
    return ids[index * tp:(index + 1) * tp] or None


def explorer_processes(cfg: Any) -> int:
    """Processes of a decoupled explorer: one per engine, an engine over rollout.tensor_model_parallel_size
    of cluster.device_mapping.rollout's devices; 1 without a rollout device list."""
    ids = device_lists(cfg).get("rollout")
    if not ids or rollout_placement(cfg) == "colocated":
        return 1
    return max(1, len(ids) // get_path(cfg, "rollout.tensor_model_parallel_size", 1))


def placement_problem(training: list[int] | None, rollout: list[int] | None, devices: int | None) -> str | None:
    """Why a device layout cannot run, or None: `training` is the one device list of the actor,
    reference and critic (None: devices 0..W-1), `rollout` the engines' list (None: colocated),
    `devices` the cluster's (nodes × devices per node; None when not counted). Engines run on the
    training devices, on the first m of them, or on devices of their own."""
    for name, ids in (("training roles'", training), ("rollout's", rollout)):
        if ids and len(set(ids)) < len(ids):
            return f"the {name} devices {ids} name a device twice (one worker process per device)"
    train = training or (list(range(devices)) if devices else None)
    if rollout and train and rollout != train[:len(rollout)] and set(rollout) & set(train):
        return (f"the rollout's devices {device_span(rollout)} beside training on {device_span(train)}: posttrain runs the engines on the "
                f"training devices, on the first m of them (the others only train), or on devices of their own (split: an "
                f"explorer of m processes beside the trainer)")
    highest = max([*(training or []), *(rollout or [])], default=-1)
    if devices and highest >= devices:
        return f"device {highest} is past the {devices} of cluster.nnodes × cluster.n_gpus_per_node"
    return None


def device_span(ids: list[int]) -> str:
    """A device list in words: the one device, "a..b" for a run, else the list."""
    if len(ids) == 1:
        return str(ids[0])
    return f"{ids[0]}..{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) else str(ids)


def training_kind(cfg: Any) -> str:
    """``algorithm.kind``: rl, sft or dpo (rl on schemas without the field)."""
    return get_path(cfg, "algorithm.kind", "rl")


def is_rl(cfg: Any) -> bool:
    return training_kind(cfg) == "rl"


def sampler_batch(cfg: Any) -> tuple[int, str]:
    """Prompts per batch the training sampler draws, and the key that sets it: data.gen_batch_size
    (a round of dynamic sampling) when set, else data.train_batch_size."""
    gen = get_path(cfg, "data.gen_batch_size", None)
    return (gen, "data.gen_batch_size") if gen is not None else (get_path(cfg, "data.train_batch_size"), "data.train_batch_size")
