"""Generate docs/config-mapping.md: every verl/ROLL/Trinity key and where it lives in posttrain.

    python -m posttrain.config.mapping > docs/config-mapping.md

The table is built from the tables the dialect loaders translate with, so the document and the
loaders cannot disagree (tests/config/test_mapping_statuses.py loads every key through its dialect
and checks the status written here):

- each field's ``refs`` (its ``todo`` marks one that has a home but no behaviour yet) and the
  section modules' ``NEGATED_REFS`` (keys meaning the opposite of a field);
- the dialect modules' ``RULES`` (keys their handlers translate by a rule, posttrain.config.tables.Rule);
- the ``NO_EFFECT`` tables (keys any value of which changes nothing: the loaders drop them);
- the ``UNSUPPORTED`` tables (keys posttrain refuses, with the reason).

A key in two of these is a contradiction and raises ValueError, except that a dialect ``RULE``
overrides a field's ref: the handler runs before the key-by-key translation and consumes the key.
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from dataclasses import dataclass

from posttrain.config.fields import FRAMEWORKS, iter_fields, section_class
from posttrain.config.schema import Config
from posttrain.config.tables import Rule, collect_no_effect, collect_unsupported

TITLES = {"verl": "verl", "roll": "ROLL", "trinity": "Trinity-RFT"}
STATUSES = ("supported", "no effect", "not implemented yet", "not supported")
DIALECT_MODULES = {fw: f"posttrain.config.dialects.{fw}" for fw in FRAMEWORKS}

__all__ = ["MappingRow", "collect_unsupported", "dialect_rules", "mapping_rows", "render"]


@dataclass(frozen=True)
class MappingRow:
    """One reference key and its posttrain home (``native`` is None for an unsupported key)."""

    framework: str
    key: str
    native: str | None
    status: str  # "supported", "no effect: ...", "not implemented yet: ...", or "not supported: ..."
    doc: str


def dialect_rules() -> dict[str, Rule]:
    """``framework:key`` -> `Rule`, from each dialect module's ``RULES`` (keyed by the bare key)."""
    out: dict[str, Rule] = {}
    for fw, name in DIALECT_MODULES.items():
        for key, rule in getattr(importlib.import_module(name), "RULES", {}).items():
            out[f"{fw}:{key}"] = rule
    return out


def _negated() -> dict[str, str]:
    from posttrain.config.dialects.index import negated_refs

    return negated_refs()


def mapping_rows(
    schema: type = Config,
    unsupported: dict[str, str] | None = None,
    no_effect: dict[str, str] | None = None,
    rules: dict[str, Rule] | None = None,
    negated: dict[str, str] | None = None,
) -> list[MappingRow]:
    """All rows, sorted by framework then key. A key in two tables raises ValueError (a rule
    overrides a field's ref: see the module docstring)."""
    real = schema is Config
    unsupported = (collect_unsupported() if real else {}) if unsupported is None else unsupported
    no_effect = (collect_no_effect() if real else {}) if no_effect is None else no_effect
    rules = (dialect_rules() if real else {}) if rules is None else rules
    negated = (_negated() if real else {}) if negated is None else negated
    rows = []
    claimed: dict[str, list[str]] = defaultdict(list)
    infos = dict(iter_fields(schema))
    for path, info in infos.items():
        if section_class(info.type) is not None:
            continue  # a section's refs are the prefix of its fields' relative refs, not a parameter
        for ref in info.refs:
            if ref in rules:
                continue
            framework, _, key = ref.partition(":")
            claimed[ref].append(path)
            status = f"not implemented yet: {info.todo}" if info.todo else "supported"
            rows.append(MappingRow(framework, key, path, status, info.doc))
    for ref, native in negated.items():
        framework, _, key = ref.partition(":")
        claimed[ref].append(native)
        doc = infos[native].doc if native in infos else ""
        rows.append(MappingRow(framework, key, native, "supported", f"The opposite of {native}: {doc}"))
    for ref, rule in rules.items():
        framework, _, key = ref.partition(":")
        claimed[ref].append(rule.native or "RULES")
        status = "supported" if rule.native else f"no effect: {rule.how}"
        rows.append(MappingRow(framework, key, rule.native, status, rule.how if rule.native else ""))
    tables = {"NO_EFFECT": no_effect, "UNSUPPORTED": unsupported}
    for name, table in tables.items():
        both = sorted(set(claimed) & set(table))
        if both:
            raise ValueError(f"keys both mapped by a field and listed as {name} (fields, NEGATED_REFS or RULES): {both}")
        claimed.update({ref: [name] for ref in table})
    both = sorted(set(no_effect) & set(unsupported))
    if both:
        raise ValueError(f"keys listed both as NO_EFFECT and UNSUPPORTED: {both}")
    for ref, reason in no_effect.items():
        framework, _, key = ref.partition(":")
        rows.append(MappingRow(framework, key, None, f"no effect: {reason}", ""))
    for ref, reason in unsupported.items():
        framework, _, key = ref.partition(":")
        rows.append(MappingRow(framework, key, None, f"not supported: {reason}", ""))
    order = {f: i for i, f in enumerate(FRAMEWORKS)}
    return sorted(rows, key=lambda r: (order[r.framework], r.key, r.native or ""))


def render(schema: type = Config, unsupported: dict[str, str] | None = None) -> str:
    """The whole markdown document."""
    rows = mapping_rows(schema, unsupported)
    out = [
        "# Config mapping: verl, ROLL and Trinity-RFT keys in posttrain",
        "",
        "Generated from the schema and the dialect loaders' tables by `python -m posttrain.config.mapping > docs/config-mapping.md`; "
        "do not edit by hand. Each reference key is **supported** (the posttrain key means the same; "
        "a verl, ROLL or Trinity-RFT file or launch line with it is translated), **no effect** (accepted "
        "and dropped: no value of it changes what posttrain does, for the reason given), **not "
        "implemented yet** (it has a home, but setting it is refused until it works), or **not "
        "supported** (refused, with the reason). `posttrain config explain KEY` documents any posttrain key.",
        "",
        "| framework | keys | " + " | ".join(STATUSES) + " |",
        "|---|---:|" + "---:|" * len(STATUSES),
    ]
    by_fw: dict[str, list[MappingRow]] = defaultdict(list)
    for row in rows:
        by_fw[row.framework].append(row)
    for fw in FRAMEWORKS:
        counts = [sum(r.status.startswith(s) for r in by_fw[fw]) for s in STATUSES]
        out.append(f"| {TITLES[fw]} | {len(by_fw[fw])} | " + " | ".join(str(c) for c in counts) + " |")
    for fw in FRAMEWORKS:
        out += ["", f"## {TITLES[fw]}", ""]
        if not by_fw[fw]:
            out.append("No keys mapped yet.")
            continue
        out += [f"| {TITLES[fw]} key | posttrain key | status | what it does |", "|---|---|---|---|"]
        for r in by_fw[fw]:
            native = f"`{r.native}`" if r.native else "—"
            out.append(f"| `{r.key}` | {native} | {_cell(r.status)} | {_cell(r.doc)} |")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    """Markdown table cells cannot hold a bare ``|`` or a newline."""
    return text.replace("|", "\\|").replace("\n", " ")


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
