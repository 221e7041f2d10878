"""Translate a foreign config (a plain dict, interpolations already resolved) into a native one.

Every leaf key is looked up in the framework's `Index` (the schema's refs, ``NEGATED_REFS`` and
``UNSUPPORTED``) and lands in exactly one `Entry` of the `Report`. A mapping with no index entry of
its own is walked; one whose key maps to a native field (a dict-valued field such as
``reward.workers``) moves whole. Framework rules that are not one-key-to-one-key (ROLL's reward
normalisation keys, Trinity's ``algorithm_type`` and tasksets, ...) run first as *handlers*
(posttrain.config.dialects.roll / .trinity) and mark the keys they consumed; value conversions
keyed by the native field run on every value (posttrain.config.dialects.values).

A value set at a field with ``todo`` (not implemented yet) that differs from the default is refused
here with the field's reason, so the message names the foreign key; native validation then sees
only what posttrain can run.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from typing import Any, Callable

from posttrain.config.dialects.index import Index, Target, build_index, native_paths
from posttrain.config.dialects.report import Entry, Report

_MISSING = object()


_INDEXED = re.compile(r"^([^\[\]]*)((?:\[\d+\])+)$")


def _at(node: Any, path: str, default: Any) -> Any:
    """The value at dotted ``path`` in nested mappings, else ``default``; a part may index lists as
    the report writes them (``eval_tasksets[0]``)."""
    for part in path.split("."):
        indexed = _INDEXED.match(part)
        name, indices = (indexed[1], [int(i) for i in re.findall(r"\d+", indexed[2])]) if indexed else (part, [])
        if not isinstance(node, Mapping) or name not in node:
            return default
        node = node[name]
        for i in indices:
            if not isinstance(node, list) or i >= len(node):
                return default
            node = node[i]
    return node


@dataclasses.dataclass
class Context:
    """State of one translation: the (resolved) foreign dict, the native dict being built, the report."""

    dialect: str
    raw: Mapping[str, Any]
    index: Index
    report: Report
    native: dict[str, Any] = dataclasses.field(default_factory=dict)
    handled: set[str] = dataclasses.field(default_factory=set)  # foreign keys consumed by a handler
    origin: dict[str, tuple[str, Any]] = dataclasses.field(default_factory=dict)  # native -> (key, value)
    interpolated: set[str] = dataclasses.field(default_factory=set)  # keys other keys interpolate
    unresolved: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> why not resolvable
    # (key, value) -> whether it is the framework's own default (verl: its trainer config), which a
    # file may spell out: such a key posttrain cannot honour is left out, as a launch line leaves it
    is_default: Callable[[str, Any], bool] = lambda key, value: False

    # ---- reading the foreign dict ---------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        return _at(self.raw, key, default)

    def has(self, key: str) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def native_get(self, path: str, default: Any = None) -> Any:
        """What the translation has set at the native dotted ``path`` so far, else ``default``."""
        return _at(self.native, path, default)

    # ---- recording outcomes ---------------------------------------------------------------------
    def set(self, native: str, value: Any, key: str, reason: str = "") -> None:
        """Put ``value`` at ``native`` for foreign ``key``, refusing a todo value or a conflict."""
        info = native_paths().get(native)
        if info is not None and info.todo and info.has_default() and value != info.default():
            self.refuse_unless_default(key, f"not implemented yet: {info.todo}", native, value)
            return
        if native in self.origin and self.origin[native][1] != value:
            other, other_value = self.origin[native]
            self.refuse(key, f"conflicts with {other} ({other_value!r}): both set {native}; keep one", native, value)
            return
        self.origin.setdefault(native, (key, value))
        node = self.native
        *parents, last = native.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
        self.report.add(Entry(key, "translated", native, value, reason))

    def refuse(self, key: str, reason: str, native: str | None = None, value: Any = None) -> None:
        self.report.add(Entry(key, "refused", native, value, reason))

    def refuse_unless_default(self, key: str, reason: str, native: str | None = None, value: Any = None) -> None:
        """Refuse, unless ``value`` is the framework's own default for ``key`` (then drop it, naming
        what another value would meet)."""
        if self.is_default(key, value):
            self.drop(key, f"{_title(self.dialect)}'s own default ({value!r}), left out as a launch line leaves it; another value: {reason}")
        else:
            self.refuse(key, reason, native, value)

    def drop(self, key: str, reason: str) -> None:
        self.report.add(Entry(key, "dropped", None, None, reason))

    def consume(self, *keys: str) -> None:
        self.handled.update(keys)


Handler = Callable[[Context], None]
ValueHook = Callable[[Context, str, Any, str], Any]  # (ctx, foreign key, value, native) -> value


def translate_dict(
    raw: Mapping[str, Any],
    dialect: str,
    handlers: list[Handler],
    value_hook: ValueHook,
    ignorable: Callable[[Context, str, Any], str | None],
    *,
    interpolated: set[str] = frozenset(),
    unresolved: Mapping[str, str] | None = None,
    is_default: Callable[[str, Any], bool] | None = None,
) -> tuple[dict[str, Any], Report]:
    """The native dict and the report. ``ignorable(ctx, key, value)`` returns why a key posttrain
    does not have may be dropped without changing the run (else None: it is refused)."""
    ctx = Context(dialect, raw, build_index(dialect), Report(dialect), interpolated=set(interpolated), unresolved=dict(unresolved or {}))
    if is_default is not None:
        ctx.is_default = is_default
    for key, why in ctx.unresolved.items():
        ctx.consume(key)
        ctx.refuse(key, why)
    for handler in handlers:
        handler(ctx)
    _walk(ctx, raw, "", None, value_hook, ignorable)
    return ctx.native, ctx.report


def _walk(ctx: Context, node: Mapping[str, Any], prefix: str, inherited: str | None, value_hook: ValueHook, ignorable) -> None:
    for name, value in node.items():
        key = f"{prefix}{name}"
        if key in ctx.handled:
            continue
        target = ctx.index.lookup(key)
        if target is not None and target.native is not None:
            if isinstance(value, Mapping):
                value = _without_refused_below(ctx, key, value)
            _translate_leaf(ctx, key, value, target, value_hook)
            continue
        if target is not None and target.no_effect is not None:
            ctx.drop(key, target.no_effect)
            continue
        reason = target.unsupported if target is not None else inherited
        if isinstance(value, Mapping) and value and (target is None or ctx.index.has_below(key)):
            _walk(ctx, value, f"{key}.", reason, value_hook, ignorable)
            continue
        _unmapped_leaf(ctx, key, value, reason, ignorable)


def _without_refused_below(ctx: Context, key: str, value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A dict-valued field (``model.override_config``) whose value holds a key the schema refuses
    (``override_config.moe_config.freeze_moe_router``): that key is refused by name, the rest moves."""
    out = dict(value)
    for below, target in ctx.index.exact.items():
        if target.unsupported is None or not below.startswith(key + "."):
            continue
        *parents, last = below[len(key) + 1:].split(".")
        node: Any = out
        for i, part in enumerate(parents):
            if not isinstance(node, Mapping) or part not in node:
                break
            node[part] = dict(node[part]) if isinstance(node[part], Mapping) else node[part]
            node = node[part]
        else:
            if isinstance(node, dict) and last in node:
                ctx.refuse(below, f"not supported: {target.unsupported}", None, node.pop(last))
                _prune(out, parents)
    return out


def _prune(tree: dict[str, Any], parents: list[str]) -> None:
    """Remove the mappings along ``parents`` that the refusal left empty, deepest first."""
    for depth in range(len(parents), 0, -1):
        node: Any = tree
        for part in parents[: depth - 1]:
            node = node[part]
        if node.get(parents[depth - 1]) == {}:
            del node[parents[depth - 1]]


def _translate_leaf(ctx: Context, key: str, value: Any, target: Target, value_hook: ValueHook) -> None:
    if value is None and target.info is not None and not _holds_none(target.info):
        # null is "not set" in the frameworks' configs; posttrain's field cannot be null
        ctx.drop(key, f"null: not set, posttrain's {target.native} keeps its default ({target.info.default()!r})")
        return
    if target.negated:
        if not isinstance(value, bool):
            ctx.refuse(key, f"expected true or false (posttrain stores the opposite at {target.native}), got {value!r}", target.native, value)
            return
        ctx.set(target.native, not value, key, "negated")
        return
    try:
        converted = value_hook(ctx, key, value, target.native)
    except _Refusal as refusal:
        ctx.refuse_unless_default(key, str(refusal), target.native, value)
        return
    note = "" if converted == value and type(converted) is type(value) else f"{value!r} -> {converted!r}"
    ctx.set(target.native, converted, key, note)


def _unmapped_leaf(ctx: Context, key: str, value: Any, reason: str | None, ignorable) -> None:
    why_ok = ignorable(ctx, key, value)
    if why_ok is not None:
        ctx.drop(key, why_ok)
    elif value is None or value == {} or value == []:
        ctx.drop(key, "empty (null), nothing to translate" + (f"; if set: {reason}" if reason else ""))
    elif any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in ctx.interpolated):
        ctx.drop(key, "interpolation source: its value was substituted where it is referenced" + (f" ({reason})" if reason else ""))
    elif reason is not None:
        ctx.refuse_unless_default(key, reason if reason.startswith("not implemented yet") else f"not supported: {reason}", None, value)
    else:
        ctx.refuse_unless_default(key, f"no posttrain equivalent: not a {_title(ctx.dialect)} key the schema knows (docs/config-mapping.md lists those it does)", None, value)


def _holds_none(info: Any) -> bool:
    """Whether a field can hold null (its type admits None, or its default is None)."""
    if info.has_default() and info.default() is None:
        return True
    return type(None) in typing.get_args(info.type) or info.type is Any


def _title(dialect: str) -> str:
    from posttrain.config.dialects.detect import TITLES

    return TITLES[dialect]


class _Refusal(Exception):
    """Raised by a value hook: the value cannot be translated (the message says why)."""


def refusal(message: str) -> _Refusal:
    return _Refusal(message)
