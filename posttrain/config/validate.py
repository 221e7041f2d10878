"""Turn a plain dict (parsed YAML + overrides) into the frozen config tree, or refuse it.

Validation happens before any model or data is touched, and it reports every problem at once: a
user fixing a config one error per run is the experience we are avoiding. Each message starts
with the full dotted key (``stages[1].actor.ppo_epochs``), shows the value given and says what is
allowed. The walk is generic over any schema made of `section` dataclasses and `param` fields, so
tests use small toy schemas and the real schema can grow without touching this module.

Type rules (deliberately strict, because a silently coerced value is a silently wrong run):
``bool`` is never an int and ``"1"`` is never a number; an integral float (``1e4``) is accepted for
an int; an int is accepted for a float; a single string given for a ``list[str]`` becomes a
one-element list (verl accepts one path or a list for ``data.train_files``).

Lists stay Python lists inside the frozen dataclasses (not tuples): the YAML round trip stays
exact and values compare equal to their defaults. Nothing may mutate them; the dataclasses are
frozen so attributes cannot be reassigned.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from posttrain.config.checks import run_checks
from posttrain.config.fields import find_field, iter_fields, section_class, section_fields
from posttrain.config.schema import Config
from posttrain.errors import ConfigError

_BAD = object()  # marks a value that failed; the problem is already recorded


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a multi-stage run: its name and the complete config it runs with."""

    name: str
    config: Any  # an instance of the schema (Config for the real one)


@dataclasses.dataclass
class _Walk:
    """State of one validation walk: the schema root (for "did you mean" across sections), the
    prefix every path gets (``stages[1].`` inside a stage) and the problems found so far."""

    root: type
    prefix: str = ""
    problems: list[str] = dataclasses.field(default_factory=list)

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{self.prefix}{path}: {message}")


def validate(raw: Mapping[str, Any], schema: type = Config) -> Any:
    """Build the frozen config tree from ``raw``; raise one `ConfigError` listing every problem.

    Checks, in order: structure and types (unknown keys, types, bounds, choices, `todo` fields),
    then cross-field rules (batch divisibility and the like), then every entry of ``stages``
    merged over the base config. A later phase runs only when the earlier one found nothing,
    because cross-field messages about a half-built config would only confuse.
    """
    walk = _Walk(root=schema)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"the config must be a mapping of sections, got {_show(raw)}")
    cfg = _build(schema, raw, "", walk)
    if walk.problems:
        raise ConfigError(walk.problems)
    problems = run_checks(cfg)
    if not problems and getattr(cfg, "stages", None):
        problems = _stage_problems(cfg, schema)
    if problems:
        raise ConfigError(problems)
    return cfg


def stage_configs(cfg: Any, schema: type | None = None) -> list[Stage]:
    """The stages a run executes, in order. Without ``stages`` this is one stage named "main"
    holding ``cfg``. Each stage is the base config with that stage's overrides merged on top
    (a key a stage does not set is inherited from the base, not from the previous stage)."""
    schema = schema or type(cfg)
    if not getattr(cfg, "stages", None):
        return [Stage("main", cfg)]
    base = _base_dict(cfg)
    out = []
    for stage in cfg.stages:
        overrides = {k: v for k, v in stage.items() if k != "name"}
        out.append(Stage(stage["name"], validate(deep_merge(base, overrides), schema)))
    return out


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: mappings merge key by key, anything else (lists too) replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _base_dict(cfg: Any) -> dict[str, Any]:
    base = dataclasses.asdict(cfg)
    base.pop("stages", None)
    return base


def _stage_problems(cfg: Any, schema: type) -> list[str]:
    """Validate each stage as the base config plus its overrides; paths say ``stages[i].``."""
    base = _base_dict(cfg)
    problems: list[str] = []
    seen: set[str] = set()
    for i, stage in enumerate(cfg.stages):
        where = f"stages[{i}]"
        name = stage.get("name")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}.name: every stage needs a name (a non-empty string), got {_show(name)}")
        elif name in seen:
            problems.append(f"{where}.name: stage name {name!r} is used twice; stage names must be unique")
        seen.add(str(name))
        if "stages" in stage:
            problems.append(f"{where}.stages: a stage cannot contain stages; list all stages at the top level")
            continue
        walk = _Walk(root=schema, prefix=f"{where}.")
        stage_cfg = _build(schema, deep_merge(base, {k: v for k, v in stage.items() if k != "name"}), "", walk)
        problems += walk.problems
        if not walk.problems:
            problems += [f"{where} ({name}): {p}" for p in run_checks(stage_cfg)]
    return problems


def _build(cls: type, raw: Any, path: str, walk: _Walk) -> Any:
    """One section: check keys, coerce each field, fill defaults. Returns _BAD on any problem."""
    if not isinstance(raw, Mapping):
        walk.add(path or "<root>", f"expected a mapping of {cls.__name__} keys, got {_show(raw)}")
        return _BAD
    fields = section_fields(cls)
    names = [f.name for f in fields]
    ok = True
    for key in raw:
        if key not in names:
            walk.add(f"{path}.{key}" if path else str(key), _unknown_message(str(key), names, path, walk))
            ok = False
    kwargs: dict[str, Any] = {}
    for info in fields:
        sub_path = f"{path}.{info.name}" if path else info.name
        if info.name not in raw:
            if not info.has_default():
                walk.add(sub_path, "is required; set it in the YAML or with an override")
                ok = False
                continue
            raw_value = info.default()
            if not dataclasses.is_dataclass(raw_value):  # defaults are trusted; sections get rebuilt
                kwargs[info.name] = raw_value
                continue
            raw_value = dataclasses.asdict(raw_value)
        else:
            raw_value = raw[info.name]
        value = _coerce(raw_value, info.type, sub_path, walk)
        if value is _BAD or not _check_value(info, value, sub_path, walk, info.name in raw):
            ok = False
            continue
        kwargs[info.name] = value
    return cls(**kwargs) if ok else _BAD


def _check_value(info: Any, value: Any, path: str, walk: _Walk, given: bool) -> bool:
    """Bounds, choices and `todo` of one coerced value; records problems, returns whether ok."""
    ok = True
    items = value if isinstance(value, list) else [value]
    for item in items:
        if info.choices is not None and item not in info.choices:
            allowed = ", ".join(str(c) for c in info.choices)
            hint = difflib.get_close_matches(str(item), [str(c) for c in info.choices], n=1)
            walk.add(path, f"{_show(item)} is not one of {allowed}" + (f"; did you mean {hint[0]}?" if hint else ""))
            ok = False
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            for op, bound in info.bounds.items():
                if not _OPS[op][0](item, bound):
                    walk.add(path, f"must be {_OPS[op][1]} {bound}, got {_show(item)}")
                    ok = False
    if info.todo and given and value != info.default():
        walk.add(path, f"not implemented yet ({info.todo}); remove it or leave it at {_show(info.default())}")
        ok = False
    return ok


_OPS = {
    "ge": (lambda v, b: v >= b, ">="),
    "gt": (lambda v, b: v > b, ">"),
    "le": (lambda v, b: v <= b, "<="),
    "lt": (lambda v, b: v < b, "<"),
}


def _coerce(value: Any, tp: Any, path: str, walk: _Walk) -> Any:
    """Check ``value`` against annotation ``tp`` and return it in canonical form, or _BAD."""
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(value, tp, path, walk)
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        return _fail(walk, path, tp, value)
    sub = section_class(tp)
    if sub is not None:
        return _build(sub, value, path, walk)
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if isinstance(value, str) and item_tp is str:
            value = [value]
        if not isinstance(value, list):
            return _fail(walk, path, tp, value)
        items = [_coerce(v, item_tp, f"{path}[{i}]", walk) for i, v in enumerate(value)]
        return _BAD if any(v is _BAD for v in items) else items
    if origin is dict:
        _, val_tp = typing.get_args(tp) or (str, Any)
        if not isinstance(value, Mapping):
            return _fail(walk, path, tp, value)
        out = {str(k): _coerce(v, val_tp, f"{path}.{k}", walk) for k, v in value.items()}
        return _BAD if any(v is _BAD for v in out.values()) else out
    return _coerce_scalar(value, tp, path, walk)


def _coerce_scalar(value: Any, tp: Any, path: str, walk: _Walk) -> Any:
    if tp is bool and isinstance(value, bool):
        return value
    if tp is int and not isinstance(value, bool):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, str):
        return value
    if tp not in (bool, int, float, str):
        raise TypeError(f"config field {path} has an annotation the validator does not support: {tp!r}")
    return _fail(walk, path, tp, value)


def _coerce_union(value: Any, tp: Any, path: str, walk: _Walk) -> Any:
    args = typing.get_args(tp)
    if value is None:
        return None if type(None) in args else _fail(walk, path, tp, value)
    options = [a for a in args if a is not type(None)]
    if len(options) == 1:
        return _coerce(value, options[0], path, walk)
    for option in options:  # first member that accepts the value wins, e.g. int | str
        trial = _Walk(root=walk.root)
        result = _coerce(value, option, path, trial)
        if not trial.problems:
            return result
    return _fail(walk, path, tp, value)


def _fail(walk: _Walk, path: str, tp: Any, value: Any) -> Any:
    message = f"expected {_describe(tp)}, got {_show(value)}"
    if isinstance(value, str) and tp in (int, float, int | None, float | None) and _is_number(value):
        message += " (a quoted string; write the number without quotes)"
    elif isinstance(value, (int, float, bool)) and tp in (str, str | None):
        message += f" (quote it if you mean the text: '{value}')"
    walk.add(path, message)
    return _BAD


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _describe(tp: Any) -> str:
    """What an annotation accepts, in words a user reads in an error message."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [_describe(a) for a in typing.get_args(tp) if a is not type(None)]
        nullable = type(None) in typing.get_args(tp)
        return " or ".join(parts) + (" or null" if nullable else "")
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin is list:
        args = typing.get_args(tp)
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin is dict or tp is dict:
        return "a mapping"
    if section_class(tp) is not None:
        return f"a mapping of {tp.__name__} keys"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def _plural(tp: Any) -> str:
    if typing.get_origin(tp) is dict or tp is dict:
        return "mappings"
    return {bool: "booleans", int: "integers", float: "numbers", str: "strings"}.get(tp, _describe(tp))


def _show(value: Any) -> str:
    """A value as the user would have written it in YAML, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unknown_message(key: str, siblings: list[str], path: str, walk: _Walk) -> str:
    """'unknown key; did you mean X?' — a close sibling first, else the same name elsewhere."""
    hints = suggest(f"{path}.{key}" if path else key, walk.root, siblings)
    if hints:
        return f"unknown key; did you mean {' or '.join(walk.prefix + h for h in hints)}?"
    command = f"posttrain config explain {path}" if path else "posttrain config explain"
    return f"unknown key; `{command}` lists the valid keys"


def suggest(path: str, root: type, siblings: list[str] | None = None) -> list[str]:
    """Full paths the user probably meant by the unknown ``path``: a close name in the same
    section, else a field of that name elsewhere in the schema ("did you mean actor.ppo_epochs?"),
    else a close name elsewhere. At most three."""
    parent, _, name = path.rpartition(".")
    if siblings is None:
        cls, _ = find_field(root, parent)
        siblings = [f.name for f in section_fields(cls)] if cls is not None else []
    close = difflib.get_close_matches(name, siblings, n=1, cutoff=0.6)
    if close:
        return [f"{parent}.{close[0]}" if parent else close[0]]
    paths = [p for p, _ in iter_fields(root)]
    exact = [p for p in paths if p.rsplit(".", 1)[-1] == name and p != path]
    if exact:
        return exact[:3]
    leaves = sorted({p.rsplit(".", 1)[-1] for p in paths})
    near = difflib.get_close_matches(name, leaves, n=1, cutoff=0.8)
    return [p for p in paths if near and p.rsplit(".", 1)[-1] == near[0]][:3]
