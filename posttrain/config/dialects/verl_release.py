"""Which verl release a translation reads, and verl's defaults in it.

posttrain.config.dialects.verl_launch reads a launch line with one of verl's releases (verl_trees.
RELEASES) and translates it inside `reading(release)`; the translation's handlers ask `release()`
and `defaults_of(key)` (verl's default of a key in that release's trees; every release's when a verl
file is read on its own).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

from posttrain.config.dialects import verl_moved
from posttrain.config.dialects.hydra import MISSING, lookup
from posttrain.config.dialects.source import resolve
from posttrain.config.dialects.verl_trees import FILES, defaults_tree


# The verl release a translation reads (verl_launch sets it: the release whose tree the line fits);
# None (a verl file read on its own) is any release posttrain knows.
_RELEASE: contextvars.ContextVar[str | None] = contextvars.ContextVar("verl_release", default=None)


def release() -> str | None:
    """The verl release being read (None: a file read on its own)."""
    return _RELEASE.get()


@contextlib.contextmanager
def reading(release: str) -> Iterator[None]:
    """Translate as verl ``release`` (its defaults decide `is_default`)."""
    token = _RELEASE.set(release)
    try:
        yield
    finally:
        _RELEASE.reset(token)


@functools.lru_cache(maxsize=8)
def _defaults(base: str, release: str) -> dict[str, Any]:
    """verl's trainer config ``base`` at ``release`` (posttrain.config.dialects.verl_trees.FILES), resolved."""
    return resolve(defaults_tree(base, release))[0]



PPO_TREES = ("ppo_trainer", "ppo_megatron_trainer")


def defaults_of(key: str, trees: tuple[str, ...] = PPO_TREES) -> list[Any]:
    """``key``'s default in each of ``trees`` of the release being read (every release when none is):
    by default verl's FSDP tree first, then the Megatron one (its megatron and model.lora sections)."""
    release = _RELEASE.get()
    # a key verl 0.10 moved is translated under its 0.8 name (posttrain.config.dialects.verl_moved)
    names = [key] + [new + key[len(old):] for new, old in verl_moved.MOVED.items() if key == old or key.startswith(old + ".")]
    out = []
    for base, at in FILES:
        if base not in trees or release not in (None, at):
            continue
        out += [node for node in (lookup(_defaults(base, at), name) for name in names) if node is not MISSING]
    return out


def value_of(ctx: Any, key: str, trees: tuple[str, ...] = PPO_TREES) -> Any:
    """The line's value of ``key`` (a translation context's), else verl's default in the release
    being read (the first of ``trees`` that has it)."""
    if ctx.has(key):
        return ctx.get(key)
    found = defaults_of(key, trees)
    return found[0] if found else None
