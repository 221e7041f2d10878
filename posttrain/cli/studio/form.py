"""The studio's form, read from the schema, and the form's values turned into a config.

The page knows nothing about posttrain's config: it renders the tree `schema_tree` sends (every
section, and every field with its doc, type, default, allowed values and `todo` marker, all read
from the `param` metadata that `config explain` and docs/config-mapping.md read too) and sends
back the values the user set, ``{dotted key: text}``. Each text is YAML, as in a command-line
override and parsed the same way (``1e-5``, ``[a, b]``, ``null``; an empty text is null), so the page needs no YAML
library: `compose` parses the texts and writes the config file, and `flatten` turns a config file
back into texts for the page (import).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posttrain.config.explain import allowed_text, default_text, yaml_scalar
from posttrain.config.fields import FieldInfo, iter_fields, section_class, section_doc, section_fields
from posttrain.config.schema import Config

HEADER = "# posttrain config written by `posttrain studio`; `posttrain config explain KEY` documents each key.\n"


def value_text(value: Any) -> str:
    """A value as the page shows it: one line of YAML, or a YAML block for mappings and for lists
    that hold mappings (``stages``), which read badly on one line."""
    if isinstance(value, dict) and value or isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
    return yaml_scalar(value)


def _members(tp: Any) -> list[Any]:
    """The types of an annotation, ``X | None`` split into its members."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return list(typing.get_args(tp))
    return [tp]


def widget(info: FieldInfo) -> tuple[str, list[str]]:
    """How the page edits a field: ``yaml`` (a text area for lists and mappings), ``select`` (with
    its options) or ``text``. Booleans are a select of true/false; ``null`` is offered whenever
    the type admits None."""
    members = _members(info.type)
    optional = type(None) in members
    null = ["null"] if optional else []
    if any(typing.get_origin(m) in (list, dict) or m in (list, dict) for m in members):
        return "yaml", []  # choices of a list field are its items' (trainer.logger): shown as allowed values
    if info.choices is not None:
        options = [yaml_scalar(c) for c in info.choices]
        return "select", options + ([o for o in null if o not in options])
    if members and all(m is bool or m is type(None) for m in members):
        return "select", ["true", "false"] + null
    return "text", []


@functools.lru_cache(maxsize=None)
def _resolved_refs() -> dict[str, tuple[str, ...]]:
    """Each path's refs with relative ones resolved (``verl:critic.optim.lr``)."""
    return {path: info.refs for path, info in iter_fields(Config)}


def _field_json(path: str, info: FieldInfo) -> dict[str, Any]:
    kind, options = widget(info)
    default = value_text(info.default()) if info.has_default() else ""
    return {
        "path": path,
        "name": info.name,
        "doc": info.doc,
        "type": info.annotation,
        "default": default,
        "default_label": default_text(info),  # "(required)" for a field without a default
        "allowed": allowed_text(info),
        "widget": kind,
        "options": options,
        "todo": info.todo,
        "refs": list(_resolved_refs().get(path, ())),
    }


def schema_tree(cls: type = Config, prefix: str = "") -> list[dict[str, Any]]:
    """The schema as nested JSON, in declaration order: ``{"section": path, "doc", "items"}`` for
    a section, the field's record (`_field_json`) for a field. A mapping of named sections
    (``reward.workers``) is one YAML field: its entries are the user's to name."""
    items: list[dict[str, Any]] = []
    for info in section_fields(cls):
        path = f"{prefix}{info.name}"
        sub = section_class(info.type)
        if sub is not None:
            items.append({"section": path, "name": info.name, "doc": info.doc or section_doc(sub),
                          "items": schema_tree(sub, f"{path}.")})
        else:
            items.append(_field_json(path, info))
    return items


@functools.lru_cache(maxsize=None)
def default_texts() -> dict[str, str]:
    """Every leaf field's dotted path -> its default as the page shows it, in schema order (config
    files follow that order); "" for a field without a default."""
    return {p: value_text(info.default()) if info.has_default() else ""
            for p, info in iter_fields(Config) if section_class(info.type) is None and ".*." not in p}


@functools.lru_cache(maxsize=None)
def field_order() -> dict[str, int]:
    """Every leaf field's dotted path -> its position in the schema."""
    return {p: i for i, p in enumerate(default_texts())}


class NotYaml(ValueError):
    """A form value that does not parse."""


def parse_value(text: str) -> Any:
    """A form value as `posttrain train` reads ``key=TEXT`` on its command line (OmegaConf's YAML:
    ``2e-5`` is a float, which plain YAML 1.1 reads as a string); empty is null."""
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist([f"v={text}"]), resolve=False)["v"]  # type: ignore[index]
    except (yaml.YAMLError, OmegaConfBaseException) as err:
        raise NotYaml(str(getattr(err, "problem", None) or str(err).splitlines()[0])) from None


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem, with the form field it belongs to (None: shown above the form)."""

    field: str | None
    message: str


def compose(values: Mapping[str, str]) -> tuple[dict[str, Any], list[Problem]]:
    """The config the form describes, as nested dicts in schema order; a text that is not YAML is
    a problem on its field (the rest still composes)."""
    order = field_order()
    tree: dict[str, Any] = {}
    problems = []
    for path in sorted(values, key=lambda p: (order.get(p, len(order)), p)):
        text = values[path]
        try:
            value = parse_value(text)
        except NotYaml as err:
            problems.append(Problem(path, f"{path}: not valid YAML: {err}"))
            continue
        *parents, leaf = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        if not isinstance(node, dict) or not leaf:
            problems.append(Problem(path if path in order else None, f"{path}: conflicts with a value set above it"))
            continue
        node[leaf] = value
    return tree, problems


def render_yaml(tree: Mapping[str, Any]) -> str:
    """The config file: a header line, then the keys the user set (``{}``: every default)."""
    if not tree:
        return HEADER + "{}\n"
    return HEADER + yaml.safe_dump(dict(tree), sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def flatten(raw: Mapping[str, Any], cls: type | None = Config, prefix: str = "") -> dict[str, str]:
    """A config dict as form values: one text per field given. A key the schema does not have keeps
    its dotted path, so the validator can name it (with "did you mean")."""
    fields = {f.name: f for f in section_fields(cls)} if cls is not None else {}
    out: dict[str, str] = {}
    for key, value in raw.items():
        path = f"{prefix}{key}"
        info = fields.get(str(key))
        sub = section_class(info.type) if info is not None else None
        if isinstance(value, Mapping) and (sub is not None or info is None and value):
            out.update(flatten(value, sub, f"{path}."))
        else:
            out[path] = value_text(value)
    return out


def field_of(key: str) -> str | None:
    """The form field a problem's leading key belongs to: the key itself, else the nearest field
    above it (``stages[1].actor.ppo_epochs`` -> ``stages``, ``reward.workers.math.x`` -> ``reward.workers``)."""
    parts = key.replace("[", ".[").split(".")
    order = field_order()
    for n in range(len(parts), 0, -1):
        if parts[n - 1].startswith("["):
            continue
        candidate = ".".join(parts[:n]).replace(".[", "[")
        if candidate in order:
            return candidate
    return None
