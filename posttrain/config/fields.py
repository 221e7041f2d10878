"""How a config field is declared: `param(default, doc, ...)`.

Every field of every config section is declared with `param`, which stores in the dataclass field's
metadata everything the validator, `config explain` and docs/config-mapping.md need:

- ``doc``: one line saying what the parameter does (required).
- bounds ``ge``/``gt``/``le``/``lt`` and ``choices``: checked at load time, named in errors.
- ``todo``: the parameter has a home in the schema but no behaviour yet. Leaving it at its default is
  fine; setting any other value is refused with "not implemented yet: <todo>". This is how a parameter
  from the reference guides is never accepted and silently ignored.
- ``refs``: the names this parameter has in the reference frameworks, each ``"<framework>:<dotted key>"``
  with framework one of ``verl``, ``roll``, ``trinity`` (e.g. ``"verl:data.train_batch_size"``).
  docs/config-mapping.md is generated from these, and dialect loaders can translate with them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
from typing import Any, Callable, Iterable

FRAMEWORKS = ("verl", "roll", "trinity")


def param(
    default: Any = MISSING,
    doc: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    choices: Iterable[Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    todo: str | None = None,
    refs: Iterable[str] = (),
) -> Any:
    """Declare a config field. Use ``factory`` for mutable defaults (lists, dicts, nested sections)."""
    if not doc:
        raise ValueError("every config field needs a one-line doc")
    refs = tuple(refs)
    for ref in refs:
        framework, _, key = ref.partition(":")
        if framework not in FRAMEWORKS or not key:
            raise ValueError(f"bad ref {ref!r}: expected '<{'|'.join(FRAMEWORKS)}>:<dotted.key>'")
    metadata = {
        "doc": doc,
        "choices": tuple(choices) if choices is not None else None,
        "ge": ge,
        "gt": gt,
        "le": le,
        "lt": lt,
        "todo": todo,
        "refs": refs,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(cls: type) -> type:
    """Decorator for a config section: a frozen, keyword-only dataclass.

    Frozen because the config must not change once derived (derivation builds new instances with
    `dataclasses.replace`). Its docstring's first line is the section's doc in `config explain`.
    """
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


def field_meta(f: dataclasses.Field) -> dict[str, Any]:
    """The metadata `param` stored on a field (empty dict for fields not made by `param`)."""
    return dict(f.metadata) if f.metadata else {}
