"""Dialect loaders: verl, ROLL and Trinity-RFT config files read as posttrain configs.

    dialect = detect(raw)                           # "native" | "verl" | "roll" | "trinity"
    native, report = translate(raw, dialect)        # native dict + what happened to every key
    foreign = read_foreign("roll.yaml")             # Hydra includes, interpolations, translation
    native = foreign_native("verl", None, ["data.train_batch_size=8"])   # a verl launch line
    text, foreign, problems = convert("roll.yaml")  # native YAML with the report as comments

The translation is driven by the schema (each field's ``refs``, the section modules' ``UNSUPPORTED``
and ``NEGATED_REFS``): see posttrain.config.dialects.index and .translate; the rules that are not one
key to one key live in .roll, .trinity and .values. `posttrain.config.load.load_config` reads a
foreign file through `native_dict`, so ``posttrain train`` and ``posttrain config show/plan`` accept
one; any key posttrain refuses makes that one `ConfigError` naming each key and its reason.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from posttrain.config.dialects import hydra, roll, roll_distill, roll_onpolicy, roll_sft, trinity, verl, verl_eval, verl_launch, verl_moved, verl_release
from posttrain.config.dialects.detect import DIALECTS, TITLES, detect
from posttrain.config.dialects.machine import machine_problem
from posttrain.config.dialects.report import Entry, Report, keep_absent_data
from posttrain.config.dialects.source import compose, read_yaml, references, resolve
from posttrain.config.dialects.translate import translate_dict
from posttrain.config.dialects.values import value_hook
from posttrain.config.fields import section_class, section_fields
from posttrain.config.schema import Config, defaults_dict
from posttrain.config.validate import deep_merge, validate
from posttrain.errors import ConfigError, UserError

_RULES = {
    "verl": (verl.HANDLERS, verl.value_hook, verl.ignorable, verl.is_default),
    "roll": (roll.HANDLERS, roll.value_hook, roll.ignorable, None),
    "trinity": (trinity.HANDLERS, value_hook, trinity.ignorable, None),
}


def translate(raw: Mapping[str, Any], dialect: str, *, interpolated: set[str] = frozenset(), unresolved: Mapping[str, str] | None = None) -> tuple[dict[str, Any], Report]:
    """Translate a resolved foreign dict: ``(native dict, report)``. Never raises for a bad key:
    the report says what was refused and why."""
    if dialect not in _RULES:
        raise ValueError(f"unknown dialect {dialect!r}: expected one of {', '.join(_RULES)}")
    if dialect == "verl" and verl_eval.is_evaluation_config(dict(raw)):  # verl's evaluation.yaml, not a trainer config
        return verl_eval.translate(dict(raw))
    if dialect == "roll" and roll_sft.is_sft(raw):  # ROLL's SFT pipeline: its sft_train role read as actor_train
        return roll_sft.translate(raw, interpolated=interpolated, unresolved=unresolved)
    if dialect == "roll" and roll_distill.is_distill(raw):  # ROLL's distillation pipeline: its student role read as actor_train
        return roll_distill.translate(raw, interpolated=interpolated, unresolved=unresolved)
    if dialect == "roll" and roll_onpolicy.is_onpolicy(raw):  # ROLL's on-policy distillation: student/teacher roles read as actor/reference
        return roll_onpolicy.translate(raw, interpolated=interpolated, unresolved=unresolved)
    handlers, hook, ignorable, is_default = _RULES[dialect]
    if dialect == "trinity":  # a one-taskset `tasksets` list read as `taskset`, reported as written
        return trinity.with_one_taskset(lambda r, i, u: translate_dict(r, dialect, handlers, hook, ignorable, interpolated=i, unresolved=u),
                                        raw, set(interpolated), dict(unresolved or {}))
    if dialect != "verl":
        return translate_dict(raw, dialect, handlers, hook, ignorable, interpolated=interpolated, unresolved=unresolved, is_default=is_default)
    legacy, renamed, dropped = verl_moved.to_legacy(raw, verl_release.release())  # verl 0.10's moved keys under their 0.8 names
    back = {new: old for old, new in renamed.items()}
    native, report = translate_dict(legacy, dialect, handlers, hook, ignorable, interpolated={back.get(k, k) for k in interpolated},
                                    unresolved={back.get(k, k): why for k, why in (unresolved or {}).items()}, is_default=is_default)
    verl_moved.named_as_written(report, renamed)
    for key, why in dropped.items():
        report.add(Entry(key, "dropped", None, None, why))
    return native, report


@dataclasses.dataclass
class Foreign:
    """A foreign file after reading and translation."""

    path: Path | None
    dialect: str
    native: dict[str, Any]
    report: Report
    set_by: dict[str, str] = dataclasses.field(default_factory=dict)  # foreign key -> command-line override

    def where(self, key: str) -> str:
        """Where a foreign key came from, as the start of a message: the override or the file."""
        if self.dialect == "verl" and (self.path is None or self.set_by):
            return verl_launch.locate(key, self.set_by, self.path)
        text = hydra.origin(key, self.set_by)
        return f"command line override {text!r}: " if text else f"{self.path}: "


def read_foreign(path: str | Path, dialect: str | None = None, raw: dict[str, Any] | None = None, overrides: list[str] = ()) -> Foreign:
    """Read, compose (Hydra ``defaults``), apply Hydra-style ``overrides`` (ROLL: only to keys the
    file has, or with ``+``, as Hydra), resolve and translate a foreign file."""
    path = Path(path)
    raw = read_yaml(path) if raw is None else raw
    dialect = dialect or detect(raw, str(path))
    if dialect == "native":
        raise UserError(f"{path}: this is already a posttrain config (give --dialect verl|roll|trinity if it is not)")
    problems: dict[str, str] = {}
    composed = compose(raw, path, problems)
    set_by: dict[str, str] = {}
    if overrides:
        composed, set_by = hydra.apply(composed, list(overrides), strict=dialect == "roll", what=f"the {TITLES[dialect]} config {path}")
    if dialect == "trinity":  # the inline verl config's interpolations point inside it
        composed, inline_problems = trinity.resolve_trainer_config(composed)
        problems.update(inline_problems)
    resolved, unresolved = resolve(composed)
    native, report = translate(resolved, dialect, interpolated=references(composed), unresolved={**problems, **unresolved})
    return Foreign(path, dialect, native, report, set_by)


def foreign_native(dialect: str, path: str | Path | None, overrides: list[str]) -> dict[str, Any]:
    """What `load_config` merges over the defaults for ``--dialect DIALECT [FILE] [KEY=VALUE ...]``:
    a verl launch line (verl's trainer defaults, the file, the overrides: `verl_launch`), or a ROLL /
    Trinity-RFT file with the dialect's overrides applied before translation."""
    if dialect == "verl":
        native, report, set_by = verl_launch.launch(path, list(overrides))
        return _native_or_refuse(Foreign(Path(path) if path is not None else None, "verl", native, report, set_by))
    if dialect not in _RULES:
        raise ConfigError(f"--dialect {dialect!r}: expected verl, roll or trinity")
    if path is None:
        raise ConfigError(f"--dialect {dialect}: give the {TITLES[dialect]} config file first, then its KEY=VALUE overrides")
    return _native_or_refuse(read_foreign(path, dialect, overrides=list(overrides)))


def native_dict(raw: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """What `load_config` merges over the defaults: a native file as is (its interpolations are
    resolved later, against the defaults too); a foreign one translated, or one `ConfigError`
    naming every refused key with its reason and every value native validation rejects."""
    dialect = detect(raw, str(path))
    if dialect == "native":
        return raw
    return _native_or_refuse(read_foreign(path, dialect, raw))


def _native_or_refuse(foreign: Foreign) -> dict[str, Any]:
    """The translation, or one `ConfigError` naming every refused key (and where it came from)."""
    problems = [f"{foreign.where(e.key)}{e.line()}" for e in foreign.report.refused]
    problems += [f"{foreign.where(_LEADING_KEY.match(p).group(0) if _LEADING_KEY.match(p) else '')}{p}" for p in check(foreign)]
    if problems:
        title = foreign.report.title()
        source = foreign.path if foreign.path is not None else "the command line"
        convert_hint = (f"; `posttrain config convert {foreign.path} OUT.yaml` writes a posttrain config without the "
                        f"refused keys, with this list as comments") if foreign.path is not None and not foreign.set_by else ""
        problems.append(f"{source}: read as a {title} config ({foreign.report.counts()}){convert_hint}")
        raise ConfigError(problems)
    return foreign.native


_LEADING_KEY = re.compile(r"[\w\[\].]+")


def check(foreign: Foreign) -> list[str]:
    """Native validation of the translation, each problem naming the foreign key it came from."""
    try:
        validate(deep_merge(defaults_dict(), foreign.native))
    except ConfigError as err:
        origin = foreign.report.native_origin()
        gpus, per_node = foreign.report.devices_from_machine, foreign.report.framework_devices_per_node
        # the processes the framework's default count gives the file's nodes: the user's cluster
        nodes = (foreign.native.get("cluster") or {}).get("nnodes", 1)
        framework_world = (nodes if isinstance(nodes, int) and nodes > 0 else 1) * (per_node or 1)
        out = []
        for problem in err.problems:
            if gpus is not None:  # a size the machine's process count does not meet: the machine's lack
                problem = machine_problem(problem, gpus, framework_world)
            match = _LEADING_KEY.match(problem)
            native = match.group(0) if match else ""
            if native in origin:
                problem = f"{origin[native]} (posttrain: {problem})"
            out.append(problem)
        return out
    return []


def convert(path: str | Path | None, dialect: str | None = None, overrides: list[str] = ()) -> tuple[str, Foreign, list[str]]:
    """``(native YAML with the report as comments, the translation, validation problems)`` of a file,
    or of a launch line: ``--dialect DIALECT [FILE] KEY=VALUE ...`` as `foreign_native` reads it."""
    if dialect == "verl" and (overrides or path is None or verl_launch.builtin(path)):
        native, report, set_by = verl_launch.launch(path, list(overrides))
        foreign = Foreign(Path(path) if path is not None else None, "verl", native, report, set_by)
    elif path is None:
        raise ConfigError(f"--dialect {dialect}: give the {TITLES.get(dialect or '', 'foreign')} config file first, then its KEY=VALUE overrides")
    else:
        foreign = read_foreign(path, dialect, overrides=list(overrides))
    problems = check(foreign)
    body = yaml.safe_dump(_schema_order(keep_absent_data(foreign.native, foreign.report), Config), sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
    text = foreign.report.comment_block(problems) + "\n" + (body if foreign.native else "{}\n") + foreign.report.refused_native_yaml()
    return text, foreign, problems


def _schema_order(value: Any, cls: type | None) -> Any:
    """Sections and keys in the schema's declaration order (the order `config show` prints)."""
    if cls is None or not isinstance(value, dict):
        return value
    fields = {f.name: f for f in section_fields(cls)}
    ordered = [k for k in fields if k in value] + [k for k in value if k not in fields]
    return {k: _schema_order(value[k], section_class(fields[k].type) if k in fields else None) for k in ordered}


__all__ = ["DIALECTS", "Entry", "Foreign", "Report", "check", "convert", "detect", "foreign_native", "native_dict", "read_foreign", "translate"]
