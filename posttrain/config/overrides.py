"""Command-line overrides (``a.b.c=value``), the per-stage ones included, and naming them in errors.

A value is parsed as YAML (ints, floats, bools, lists, null), as OmegaConf's dotlist does.

One stage of a multi-stage config is overridden by its index or its name:
``stages.1.trainer.total_training_steps=50``, ``stages[1].trainer.total_training_steps=50`` or
``stages.rl.trainer.total_training_steps=50``. The stage must exist in the config (a name that is
all digits is read as an index); the key merges into that stage's own overrides, like a key the
stage sets in the file. They apply after every plain override, so ``stages=[...]`` given on the
command line is the list they index.

A problem found in a value set on the command line names the override as the user typed it
(``command line override 'rollout.n=0': rollout.n: must be >= 1, got 0``), not the YAML file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posttrain.config.validate import deep_merge
from posttrain.errors import ConfigError

_STAGE_KEY = re.compile(r"^stages(?:\.([^.\[\]]+)|\[(\d+)\])\.(.+)$")
_KEY = re.compile(r"(?<![\w/.\[])[a-z_]\w*(?:\.\w+|\[\d+\])+")  # a dotted key, not part of a path
_STAGE_PREFIX = re.compile(r"^(stages\[\d+\]) \([^)]*\): ")  # a cross-field problem of one stage


@dataclass(frozen=True)
class Override:
    text: str  # as typed
    key: str  # the dotted key, as typed

    @property
    def for_stage(self) -> bool:
        return self.key.startswith(("stages.", "stages["))


def split_overrides(overrides: Sequence[str]) -> list[Override]:
    """Check the ``KEY=VALUE`` form of every override."""
    out = []
    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip() or key != key.strip():
            raise ConfigError(
                f"override {item!r}: expected KEY=VALUE with a dotted key, e.g. actor.ppo_epochs=2 "
                f"(no spaces around '='; an empty value means null)"
            )
        out.append(Override(item, key))
    return out


def _parse(item: str, shown: str) -> dict[str, Any]:
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist([item]), resolve=False)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"command line override {shown!r}: {first}") from None


def apply_overrides(merged: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`merged` with every override applied: plain ones merged key by key, then per-stage ones."""
    items = split_overrides(overrides)
    for item in (o for o in items if not o.for_stage):
        merged = deep_merge(merged, _parse(item.text, item.text))
    for item in (o for o in items if o.for_stage):
        merged = _apply_to_stage(merged, item)
    return merged


def _apply_to_stage(merged: dict[str, Any], item: Override) -> dict[str, Any]:
    match = _STAGE_KEY.match(item.key)
    if not match:
        raise ConfigError(
            f"command line override {item.text!r}: expected stages.<index or name>.<key>=value, "
            "e.g. stages.1.trainer.total_training_steps=50 or stages.rl.trainer.total_training_steps=50"
        )
    stages = merged.get("stages")
    if not stages or not isinstance(stages, list) or not all(isinstance(s, Mapping) for s in stages):
        raise ConfigError(f"command line override {item.text!r}: the config has no stages to override")
    index = stage_index(stages, match.group(1) or match.group(2))
    if index is None:
        listed = ", ".join(f"{i}: {s.get('name')}" for i, s in enumerate(stages))
        raise ConfigError(
            f"command line override {item.text!r}: no stage {match.group(1) or match.group(2)!r}; "
            f"the config's stages are {listed} (name one by index or name)"
        )
    value = item.text.partition("=")[2]
    stages = list(stages)
    stages[index] = deep_merge(stages[index], _parse(f"{match.group(3)}={value}", item.text))
    return dict(merged, stages=stages)


def stage_index(stages: Sequence[Mapping[str, Any]], selector: str) -> int | None:
    """The index `selector` (an index, or a stage name) names in `stages`, or None."""
    if selector.isdigit():
        return int(selector) if int(selector) < len(stages) else None
    names = [s.get("name") for s in stages]
    return names.index(selector) if selector in names else None


def _canonical(key: str, stages: Sequence[Mapping[str, Any]] | None) -> str:
    """An override key as validation paths spell it: ``stages.rl.x`` -> ``stages[1].x``."""
    match = _STAGE_KEY.match(key)
    if not match or not isinstance(stages, list):
        return key
    index = stage_index([s for s in stages if isinstance(s, Mapping)], match.group(1) or match.group(2))
    return key if index is None else f"stages[{index}].{match.group(3)}"


def overriding(key: str, overrides: Sequence[str], stages: Sequence[Mapping[str, Any]] | None = None) -> str | None:
    """The override (as typed) that set `key` or a parent of it; the last one when several did."""
    found = None
    for item in split_overrides(overrides):
        k = _canonical(item.key, stages)
        if key == k or key.startswith(k + ".") or key.startswith(k + "["):
            found = item.text
    return found


def _mentioned_keys(problem: str) -> list[str]:
    """Dotted keys a problem mentions, its leading key first; inside a stage (``stages[1] (rl): ...``)
    each key both as that stage's and as the base config's (a stage inherits base keys)."""
    stage = _STAGE_PREFIX.match(problem)
    keys = _KEY.findall(problem[stage.end():] if stage else problem)
    return [f"{stage.group(1)}.{k}" for k in keys] + keys if stage else keys


def locate(problem: str, path: Any, overrides: Sequence[str], stages: Sequence[Mapping[str, Any]] | None = None) -> str:
    """Prefix a problem with its source: the override that set a key it mentions (its leading key
    first; a cross-field problem also names the other keys), else the config file. Without a file
    (a config built from defaults and overrides only, by a library caller) every key is the
    caller's, and the problem is returned as it is."""
    if path is None:
        return problem
    for key in _mentioned_keys(problem):
        item = overriding(key, overrides, stages)
        if item is not None:
            return f"command line override {item!r}: {problem}"
    return f"{path}: {problem}"
