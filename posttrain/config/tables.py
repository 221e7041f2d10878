"""The tables beside the schema that say what a foreign key does when no field's ``refs`` name it.

The dialect loaders (posttrain.config.dialects) and docs/config-mapping.md (posttrain.config.mapping)
both read these, so the document and the loaders cannot disagree:

- ``UNSUPPORTED`` (a section module): ``"<framework>:<key>"`` -> the reason posttrain refuses it;
- ``NO_EFFECT`` (a section or dialect module): ``"<framework>:<key>"`` -> why any value of it
  changes nothing in posttrain (the loaders drop it, naming that reason);
- ``RULES`` (a dialect module, posttrain.config.dialects.verl/roll/trinity): foreign keys its
  handlers translate by a rule that is more than one key to one key, as `Rule` records.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any

from posttrain.config.fields import FRAMEWORKS


@dataclasses.dataclass(frozen=True)
class Rule:
    """A foreign key a dialect handler translates: the posttrain key(s) it sets (None: the handler
    drops it, as it changes nothing), how, and a value the handler translates (``sample``, with the
    other keys of the file it needs in ``context``), which tests/config/test_mapping_statuses.py loads."""

    native: str | None
    how: str
    sample: Any = 1
    context: tuple[tuple[str, Any], ...] = ()


def section_modules() -> list[str]:
    import posttrain.config.sections as sections

    return ["posttrain.config.schema"] + [f"{sections.__name__}.{m.name}" for m in pkgutil.iter_modules(sections.__path__)]


def collect(table: str, modules: list[str] | None = None) -> dict[str, str]:
    """Merge one ``framework:key -> reason`` table (``UNSUPPORTED``, ``NO_EFFECT``) of the given
    modules (all section modules by default); a key listed twice with two reasons is a ValueError."""
    merged: dict[str, str] = {}
    for name in section_modules() if modules is None else modules:
        for ref, reason in getattr(importlib.import_module(name), table, {}).items():
            framework, _, key = ref.partition(":")
            if framework not in FRAMEWORKS or not key or not reason:
                raise ValueError(f"{name}.{table}: bad entry {ref!r}: {reason!r} (want 'framework:key': 'reason')")
            if merged.get(ref, reason) != reason:  # the same entry re-exported by another module is fine
                raise ValueError(f"{name}.{table}: {ref!r} is listed elsewhere with another reason: {merged[ref]!r}")
            merged[ref] = reason
    return merged


def collect_unsupported(modules: list[str] | None = None) -> dict[str, str]:
    """Every section module's ``UNSUPPORTED`` entries."""
    return collect("UNSUPPORTED", modules)


def collect_no_effect(modules: list[str] | None = None) -> dict[str, str]:
    """Every section module's ``NO_EFFECT`` entries."""
    return collect("NO_EFFECT", modules)
