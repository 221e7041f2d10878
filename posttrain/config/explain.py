"""`posttrain config explain`: the schema's own documentation, one key or one section at a time.

Everything shown comes from the `param` metadata, so the text cannot drift from what the validator
enforces: the type as written in the source, the default, bounds and choices, whether the field is
implemented (`todo`), and the names it has in verl/ROLL/Trinity.
"""

from __future__ import annotations

from typing import Any

import yaml

from posttrain.config.fields import FieldInfo, find_field, iter_fields, section_class, section_doc, section_fields
from posttrain.config.schema import Config
from posttrain.config.validate import suggest
from posttrain.errors import ConfigError


def explain(key: str | None = None, schema: type = Config) -> str:
    """Text for one dotted key (a field or a section); with no key, the list of sections."""
    key = (key or "").strip().strip(".")
    cls, info = find_field(schema, key)
    if cls is not None:
        return _explain_section(key, cls)
    if info is not None:
        return _explain_field(key, info, schema)
    hints = suggest(key, schema)
    hint = f"; did you mean {' or '.join(hints)}?" if hints else "; `posttrain config explain` lists the sections"
    raise ConfigError(f"{key}: no such config key or section{hint}")


def _explain_section(path: str, cls: type) -> str:
    """A table of the section's fields: name, type = default, doc (sub-sections marked)."""
    title = path or "posttrain config"
    rows = []
    for info in section_fields(cls):
        sub = section_class(info.type)
        if sub is not None:
            rows.append((info.name, "[section]", info.doc or section_doc(sub)))
        else:
            todo = "  [not implemented yet]" if info.todo else ""
            rows.append((info.name, f"{info.annotation} = {default_text(info)}", info.doc + todo))
    name_w = max((len(r[0]) for r in rows), default=0)
    type_w = min(max((len(r[1]) for r in rows), default=0), 32)
    lines = [f"{title}: {section_doc(cls)}", ""]
    lines += [f"  {name:<{name_w}}  {kind:<{type_w}}  {doc}" for name, kind, doc in rows]
    if path and rows:
        lines += ["", f"`posttrain config explain {path}.{rows[0][0]}` shows one entry in full."]
    else:
        lines += ["", "`posttrain config explain SECTION` lists a section; `... explain SECTION.KEY` shows one key."]
    return "\n".join(lines) + "\n"


def _explain_field(path: str, info: FieldInfo, schema: type) -> str:
    lines = [path, f"  {info.doc}", "", f"  type:     {info.annotation}", f"  default:  {default_text(info)}"]
    allowed = allowed_text(info)
    if allowed:
        lines.append(f"  allowed:  {allowed}")
    lines.append(f"  status:   {'not implemented yet: ' + info.todo if info.todo else 'implemented'}")
    refs = _resolved_refs(path, schema)
    if refs:
        lines.append(f"  same as:  {', '.join(refs)}")
    return "\n".join(lines) + "\n"


def _resolved_refs(path: str, schema: type) -> list[str]:
    """The field's refs with relative ones (``verl:.lr``) resolved for this path."""
    return next((list(info.refs) for p, info in iter_fields(schema) if p == path), [])


def default_text(info: FieldInfo) -> str:
    if not info.has_default():
        return "(required)"
    return yaml_scalar(info.default())


def yaml_scalar(value: Any) -> str:
    """A value written the way the user writes it in YAML (null, true, [a, b])."""
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def allowed_text(info: FieldInfo) -> str:
    parts = []
    if info.choices is not None:
        parts.append("one of " + ", ".join(yaml_scalar(c) for c in info.choices))
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    parts += [f"{symbols[op]} {bound}" for op, bound in info.bounds.items()]
    return "; ".join(parts)
