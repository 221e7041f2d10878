"""verl 0.10's new names for keys that 0.8 had, read as the 0.8 keys they are.

verl 0.10 moved some sections without changing what their keys do (``critic.fsdp`` is 0.8's
``critic.model.fsdp_config``; ``reward.*`` holds what 0.8's ``reward_model``, ``custom_reward_function``
and ``sandbox_fusion`` keys held). `MOVED` lists each, checked against both releases' sources. The
translation reads such a key under its 0.8 name, so that one rule serves both releases, and the
report names the key the user wrote.

Some 0.8 keys are still in 0.10's tree but no longer read by its trainer (`NOT_READ`): a line read
as 0.10 that sets one has it dropped with the reason (verl_launch reads a line that sets one with
0.8 when 0.8's tree has all its keys: that is the verl it was written for).

verl 0.10 still accepts the 0.8 names of the reward keys (its legacy_reward_impl.yaml, null by
default) and copies each one that is set over its new twin before the run
(``migrate_legacy_reward_impl`` in verl/experimental/reward_loop/reward_loop.py): where a line sets
both, the 0.8 name wins here too, and the new one is dropped saying so.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects.hydra import MISSING, lookup, put
from posttrain.config.dialects.report import Report
from posttrain.config.dialects.source import leaves

# verl 0.10 key or section -> the verl 0.8 one with the same meaning (a section's keys move with it)
MOVED: dict[str, str] = {
    # the critic's FSDP engine settings (verl/trainer/config/critic/dp_critic.yaml: `fsdp`, 0.8's
    # `model.fsdp_config`; both are the FSDPEngineConfig the critic's engine is built with)
    "critic.fsdp": "critic.model.fsdp_config",
    # verl 0.10's reward section (verl/trainer/config/reward/reward.yaml), the reverse of its migration
    "reward.num_workers": "reward_model.num_workers",
    "reward.reward_manager.name": "reward_model.reward_manager",
    "reward.reward_manager.source": "reward_model.reward_loop_source",
    "reward.reward_manager.module.path": "reward_model.reward_loop_module_path",
    "reward.reward_manager.module.name": "reward_model.reward_loop_class_name",
    "reward.custom_reward_function": "custom_reward_function",
    "reward.reward_model.enable": "reward_model.enable",
    "reward.reward_model.enable_resource_pool": "reward_model.enable_resource_pool",
    "reward.reward_model.n_gpus_per_node": "reward_model.n_gpus_per_node",
    "reward.reward_model.nnodes": "reward_model.nnodes",
    "reward.reward_model.model_path": "reward_model.model.path",
    "reward.reward_model.rollout": "reward_model.rollout",
    "reward.reward_kwargs": "reward_model.reward_kwargs",
    "reward.sandbox_fusion": "reward_model.sandbox_fusion",
    # 0.10's legacy top-level sandbox_fusion, migrated to reward.sandbox_fusion: 0.8's reward_model.sandbox_fusion
    "sandbox_fusion": "reward_model.sandbox_fusion",
}


_LEGACY_REWARD = ("verl 0.10's trainer (main_ppo) reads its reward section, reward.*, and not this 0.8 name, which only its "
                  "fully-async trainer copies over reward.* (migrate_legacy_reward_impl)")
# verl 0.10: keys of its tree that its trainer does not read (checked in its source) -> why
NOT_READ: dict[str, dict[str, str]] = {"0.10": {
    "reward_model": _LEGACY_REWARD,
    "custom_reward_function": _LEGACY_REWARD,
    "sandbox_fusion": _LEGACY_REWARD,
    "critic.ulysses_sequence_parallel_size": "verl 0.10's critic engine reads critic.fsdp.ulysses_sequence_parallel_size",
    "critic.grad_clip": "verl 0.10's critic engine clips with critic.optim.clip_grad",
    "actor_rollout_ref.actor.grad_clip": "verl 0.10's actor engine clips with actor_rollout_ref.actor.optim.clip_grad",
}}


def _items(value: Any, prefix: str) -> dict[str, Any]:
    """``{dotted key: value}`` of ``value`` found at ``prefix`` (itself when it is no mapping, or an empty one)."""
    return leaves(value, prefix + ".") if isinstance(value, Mapping) and value else {prefix: value}


def unread(tree: Mapping[str, Any], release: str | None) -> dict[str, str]:
    """The keys of ``tree`` (dotted, with a value) that verl ``release`` does not read -> why."""
    out = {}
    for section, why in NOT_READ.get(release or "", {}).items():
        value = lookup(tree, section)
        if value is not MISSING:
            out.update({leaf: why for leaf, v in _items(value, section).items() if v is not None})
    return out


def _pop(tree: dict[str, Any], dotted: str) -> Any:
    *parents, last = dotted.split(".")
    node = tree
    for part in parents:
        node = node.get(part)
        if not isinstance(node, dict):
            return None
    return node.pop(last, None)


def _prune(tree: dict[str, Any], dotted: str) -> None:
    """Remove the mappings on ``dotted``'s path that moving its keys left empty."""
    parts = dotted.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        parent = tree
        for part in parts[: depth - 1]:
            parent = parent.get(part, {})
        name = parts[depth - 1]
        if isinstance(parent, dict) and parent.get(name) == {}:
            del parent[name]


def to_legacy(raw: Mapping[str, Any], release: str | None = None) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """``(tree with 0.10's moved keys under their 0.8 names, {0.8 key: the key as written}, {key as
    written: why it is dropped})``: the keys ``release`` does not read are dropped; where both names
    of a key are set (a file read with no release named), the 0.8 one stays, as verl's migration
    copies it over the new one."""
    tree = copy.deepcopy(dict(raw))
    renamed: dict[str, str] = {}
    dropped = unread(tree, release)
    for key in dropped:
        _pop(tree, key)
        _prune(tree, key)
    for new, old in MOVED.items():
        if lookup(tree, new) is MISSING:
            continue
        for leaf, value in _items(_pop(tree, new), new).items():
            target = old + leaf[len(new):]
            if lookup(tree, target) not in (MISSING, None):
                dropped[leaf] = (f"{target} is set too, and verl 0.10 copies that (its 0.8 name) over this key before the run "
                                 f"(migrate_legacy_reward_impl): {target} is read")
                continue
            put(tree, target, value)
            renamed[target] = leaf
        _prune(tree, new)
    return tree, renamed, dropped


def named_as_written(report: Report, renamed: Mapping[str, str]) -> None:
    """The report's entries under the keys the user wrote."""
    report.entries[:] = [dataclasses.replace(e, key=renamed.get(e.key, e.key)) for e in report.entries]
