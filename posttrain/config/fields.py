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
  A section class used in several places (``OptimConfig`` under ``actor`` and ``critic``) writes its
  refs *relative*, with a leading dot (``"verl:.lr"``); the field holding the section gives the
  prefix in its own refs (``optim: OptimConfig = param(..., refs=["verl:critic.optim"])``), so each
  use resolves to its own key (``verl:critic.optim.lr``). See `iter_fields`.

The second half of this module walks a schema (any tree of `section` dataclasses) for the validator,
`config explain` and the mapping generator, so all three agree on paths, types and defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
import functools
import types
import typing
from typing import Any, Callable, Iterable, Iterator

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


# ---- walking a schema ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """One field of one section, with its annotation resolved to a real type."""

    name: str
    type: Any  # the resolved annotation, e.g. ``int | None``
    annotation: str  # the annotation as written in the source, e.g. ``"int | None"``
    field: dataclasses.Field
    doc: str
    choices: tuple[Any, ...] | None
    bounds: dict[str, float]  # only the bounds that are set, e.g. {"ge": 1}
    todo: str | None
    refs: tuple[str, ...]

    def has_default(self) -> bool:
        return self.field.default is not MISSING or self.field.default_factory is not MISSING

    def default(self) -> Any:
        """A fresh default value (factories are called, so mutable defaults are never shared)."""
        if self.field.default_factory is not MISSING:
            return self.field.default_factory()
        return self.field.default


def section_class(tp: Any) -> type | None:
    """The section dataclass behind an annotation (``X`` or ``X | None``), else None."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1:
            return section_class(inner[0])
    return None


def entry_section(tp: Any) -> type | None:
    """The section class of the values of a ``dict[str, Section]`` field (reward.workers), else None."""
    if typing.get_origin(tp) is dict:
        args = typing.get_args(tp)
        return section_class(args[1]) if len(args) == 2 else None
    return None


@functools.lru_cache(maxsize=None)
def section_fields(cls: type) -> tuple[FieldInfo, ...]:
    """The init fields of a section, in declaration order, with resolved types and metadata."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        meta = field_meta(f)
        annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", repr(f.type))
        out.append(
            FieldInfo(
                name=f.name,
                type=hints[f.name],
                annotation=annotation,
                field=f,
                doc=meta.get("doc", ""),
                choices=meta.get("choices"),
                bounds={k: meta[k] for k in ("ge", "gt", "le", "lt") if meta.get(k) is not None},
                todo=meta.get("todo"),
                refs=tuple(meta.get("refs", ())),
            )
        )
    return tuple(out)


def section_doc(cls: type) -> str:
    """First line of a section's docstring (its doc in `config explain`)."""
    return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


def _resolve_refs(refs: Iterable[str], prefixes: dict[str, str]) -> tuple[str, ...]:
    out = []
    for ref in refs:
        framework, _, key = ref.partition(":")
        if key.startswith("."):
            if framework in prefixes:  # relative ref: only meaningful under a prefix of its framework
                out.append(f"{framework}:{prefixes[framework]}{key}")
        else:
            out.append(ref)
    return tuple(out)


def iter_fields(
    schema: type, prefix: str = "", _prefixes: dict[str, str] | None = None
) -> Iterator[tuple[str, FieldInfo]]:
    """Every field of a schema, depth first, as ``(dotted.path, info)``; sections come before
    their fields. ``info.refs`` has relative refs resolved against the enclosing section's refs.
    The fields of the sections a ``dict[str, Section]`` field holds follow it as
    ``<field>.*.<name>`` (``reward.workers.*.tag_included``)."""
    prefixes = _prefixes or {}
    for info in section_fields(schema):
        path = f"{prefix}{info.name}"
        refs = _resolve_refs(info.refs, prefixes)
        yield path, dataclasses.replace(info, refs=refs)
        sub = section_class(info.type)
        if sub is not None:
            sub_prefixes = {r.partition(":")[0]: r.partition(":")[2] for r in refs}
            yield from iter_fields(sub, f"{path}.", sub_prefixes)
        entry = entry_section(info.type)
        if entry is not None:  # a mapping of named sections: its fields under a `*` component
            entry_prefixes = {r.partition(":")[0]: r.partition(":")[2] + ".*" for r in refs}
            yield from iter_fields(entry, f"{path}.*.", entry_prefixes)


def find_field(schema: type, path: str) -> tuple[type | None, FieldInfo | None]:
    """Look up a dotted path: ``(section class, None)`` for a section (or the root for ""),
    ``(None, info)`` for a leaf, ``(None, None)`` when there is no such path."""
    cls: type | None = schema
    info: FieldInfo | None = None
    for part in path.split(".") if path else []:
        if cls is None:
            return None, None
        match = [f for f in section_fields(cls) if f.name == part]
        if not match:
            return None, None
        info = match[0]
        cls = section_class(info.type)
    return (cls, None) if cls is not None else (None, info)
