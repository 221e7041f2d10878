"""What the schema knows about one framework's keys: the reverse of the fields' ``refs``.

Built from the same walk as docs/config-mapping.md (`posttrain.config.fields.iter_fields`), the
section modules' ``UNSUPPORTED`` tables (keys posttrain refuses, with the reason), ``NO_EFFECT``
tables (keys any value of which changes nothing: dropped, with the reason) and ``NEGATED_REFS``
tables (keys meaning the opposite of a field): posttrain.config.tables. Nothing here is written by hand, so a
field that gains a ref is translated by every dialect loader at once.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from typing import Any

from posttrain.config.fields import FieldInfo, iter_fields, section_class
from posttrain.config.schema import Config
from posttrain.config.tables import collect_no_effect, collect_unsupported


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one foreign key goes: a native field (``native``/``info``) or nowhere (``unsupported``)."""

    native: str | None
    info: FieldInfo | None = None
    negated: bool = False
    unsupported: str | None = None  # the schema's reason when posttrain refuses the key
    no_effect: str | None = None  # why any value of the key changes nothing (it is dropped)


@dataclasses.dataclass(frozen=True)
class Index:
    """One framework's keys: exact keys, ``*`` patterns, and the first two levels for detection."""

    framework: str
    exact: dict[str, Target]
    patterns: dict[str, Target]  # keys with a ``*`` component (ROLL's ``rewards.*.worker_cls``)

    def lookup(self, key: str) -> Target | None:
        """The target of a dotted key (list items written ``key[0]`` never match)."""
        if key in self.exact:
            return self.exact[key]
        parts = key.split(".")
        for pattern, target in self.patterns.items():
            pat = pattern.split(".")
            if len(pat) == len(parts) and all(p in ("*", k) for p, k in zip(pat, parts)):
                return target
        return None

    def has_below(self, key: str) -> bool:
        """Whether some known key lies below ``key`` (then a mapping there is walked, not taken whole)."""
        prefix = key + "."
        if any(k.startswith(prefix) for k in self.exact):
            return True
        parts = key.split(".")
        for pattern in self.patterns:
            pat = pattern.split(".")
            if len(pat) > len(parts) and all(p in ("*", k) for p, k in zip(pat, parts)):
                return True
        return False

    def top_paths(self) -> set[str]:
        """First- and second-level key paths (``actor_train``, ``actor_train.model_args``), for `detect`."""
        out: set[str] = set()
        for key in list(self.exact) + list(self.patterns):
            parts = key.split(".")
            out.add(parts[0])
            if len(parts) > 1:
                out.add(f"{parts[0]}.{parts[1]}")
        return out


def negated_refs() -> dict[str, str]:
    """``framework:key`` -> native dotted path, from every section module's ``NEGATED_REFS``.

    A module's table names fields relative to the section it defines (``enable_gradient_checkpointing``
    in model.py is ``model.enable_gradient_checkpointing``), so the section name is the module name.
    """
    import posttrain.config.sections as sections

    out: dict[str, str] = {}
    for mod in pkgutil.iter_modules(sections.__path__):
        table = getattr(importlib.import_module(f"{sections.__name__}.{mod.name}"), "NEGATED_REFS", {})
        for ref, field in table.items():
            out[ref] = f"{mod.name}.{field}"
    return out


@functools.lru_cache(maxsize=None)
def build_index(framework: str, schema: Any = Config) -> Index:
    """One framework's keys."""
    exact: dict[str, Target] = {}
    patterns: dict[str, Target] = {}
    infos = dict(iter_fields(schema))

    def put(key: str, target: Target) -> None:
        (patterns if "*" in key.split(".") else exact)[key] = target

    for path, info in infos.items():
        if section_class(info.type) is not None:
            continue  # a section's refs only prefix its fields' relative refs
        for ref in info.refs:
            fw, _, key = ref.partition(":")
            if fw == framework:
                put(key, Target(path, info))
    for ref, native in negated_refs().items():
        fw, _, key = ref.partition(":")
        if fw == framework:
            put(key, Target(native, infos.get(native), negated=True))
    for ref, reason in collect_unsupported().items():
        fw, _, key = ref.partition(":")
        if fw == framework:
            put(key, Target(None, unsupported=reason))
    for ref, reason in collect_no_effect().items():
        fw, _, key = ref.partition(":")
        if fw == framework:
            put(key, Target(None, no_effect=reason))
    return Index(framework, exact, patterns)


@functools.lru_cache(maxsize=None)
def native_paths(schema: Any = Config) -> dict[str, FieldInfo]:
    """Every native dotted path (sections included) and its field."""
    return dict(iter_fields(schema))
