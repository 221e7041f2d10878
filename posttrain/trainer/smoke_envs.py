"""`posttrain smoke` on an agentic config: a handful of environments instead of the cluster's hundreds.

An agentic step plays `num_env_groups x group_size` episodes, which must divide the step's
trajectories (data.train_batch_size x rollout.n). The smoke run keeps one group of at most two
environments per manager, so its two-trajectory steps fit; the tags beyond the first then play no
group (their `num_groups_partition` goes with the count it split). The prompt gets room for the env's
instruction and first observation in the tiny tokenizer's tokens.
"""

from __future__ import annotations

from typing import Any

MANAGERS = ("train_env_manager", "val_env_manager")
# The tiny tokenizer writes about one token per character: an env's instruction and observation,
# a few hundred tokens for the real one, need this much room.
PROMPT_LENGTH = 4096
GROUPS = 1
GROUP_SIZE = 2


def shrink_env_managers(native: dict[str, Any]) -> list[str]:
    """Shrink each env manager the config sets; one line per change."""
    env = native.get("env")
    if not isinstance(env, dict):
        return []
    lines = []
    for name in MANAGERS:
        manager = env.get(name)
        if not isinstance(manager, dict):
            continue
        for key, new in (("num_env_groups", lambda v: min(v, GROUPS)), ("group_size", lambda v: min(v, GROUP_SIZE))):
            old = manager.get(key)
            if isinstance(old, int) and not isinstance(old, bool) and new(old) != old:
                manager[key] = new(old)
                lines.append(f"env.{name}.{key}: {old} -> {manager[key]}")
        if manager.get("num_groups_partition") and "num_env_groups" in manager:
            lines.append(f"env.{name}.num_groups_partition: {manager.pop('num_groups_partition')} -> left out (the first tag plays the group)")
    data = native.setdefault("data", {})
    if isinstance(env.get("train_env_manager"), dict) and (data.get("max_prompt_length") or 0) < PROMPT_LENGTH:
        lines.append(f"data.max_prompt_length: {data.get('max_prompt_length')} -> {PROMPT_LENGTH} (the tiny tokenizer's tokens are "
                     "about one per character: room for the env's instruction and observation)")
        data["max_prompt_length"] = PROMPT_LENGTH
    return lines
