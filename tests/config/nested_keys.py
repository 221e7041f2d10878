"""A dotted key and its value as the nested mapping a config file writes (for the dialect tests)."""

from __future__ import annotations

from typing import Any


def nested(key: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``.

    >>> nested("actor_train.training_args.max_steps", 7)
    {'actor_train': {'training_args': {'max_steps': 7}}}
    """
    raw: dict[str, Any] = {}
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return raw
