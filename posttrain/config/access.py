"""Read-only accessors of a config that the cross-field rules (`posttrain.config.checks` and its
companions) and the stages share: a dotted path with a default, the training kind, the worker count.
They work on any object with the attributes they read (schemas of tests too), and import nothing of
posttrain, so every checks module can import them without a circle.
"""

from __future__ import annotations

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


def device_lists(cfg: Any) -> dict[str, list[int]]:
    """The non-empty device lists of cluster.device_mapping, by role."""
    lists = {role: list(get_path(cfg, f"cluster.device_mapping.{role}", None) or []) for role in MAPPED_ROLES}
    return {role: ids for role, ids in lists.items() if ids}


def world_size(cfg: Any) -> int:
    """Worker processes: the devices of a (colocated) cluster.device_mapping when one is given, else
    nodes × devices per node, or 1 process with 0 devices per node."""
    lists = device_lists(cfg)
    if lists:
        return len(next(iter(lists.values())))
    gpus = get_path(cfg, "cluster.n_gpus_per_node", 0)
    return get_path(cfg, "cluster.nnodes", 1) * gpus if gpus > 0 else 1


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
