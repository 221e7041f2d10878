"""Generate docs/config-mapping.md: every verl/ROLL/Trinity key and where it lives in posttrain.

    python -m posttrain.config.mapping > docs/config-mapping.md

The table is built from the schema itself, so it cannot drift: each field's ``refs`` say which
reference keys it stands for (its ``todo`` marks one that has a home but no behaviour yet), and a
section module may define ``UNSUPPORTED: dict[str, str]`` mapping ``"<framework>:<dotted key>"``
to the reason posttrain does not offer that key. A test regenerates the file and compares.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict
from dataclasses import dataclass

from posttrain.config.fields import FRAMEWORKS, iter_fields, section_class
from posttrain.config.schema import Config

TITLES = {"verl": "verl", "roll": "ROLL", "trinity": "Trinity-RFT"}


@dataclass(frozen=True)
class MappingRow:
    """One reference key and its posttrain home (``native`` is None for an unsupported key)."""

    framework: str
    key: str
    native: str | None
    status: str  # "supported", "not implemented yet: ...", or "not supported: ..."
    doc: str


def collect_unsupported(modules: list[str] | None = None) -> dict[str, str]:
    """Merge the ``UNSUPPORTED`` dicts of the schema's modules (all section modules by default)."""
    if modules is None:
        import posttrain.config.sections as sections

        modules = ["posttrain.config.schema"] + [
            f"{sections.__name__}.{m.name}" for m in pkgutil.iter_modules(sections.__path__)
        ]
    merged: dict[str, str] = {}
    for name in modules:
        for ref, reason in getattr(importlib.import_module(name), "UNSUPPORTED", {}).items():
            framework, _, key = ref.partition(":")
            if framework not in FRAMEWORKS or not key or not reason:
                raise ValueError(f"{name}.UNSUPPORTED: bad entry {ref!r}: {reason!r} (want 'framework:key': 'reason')")
            if merged.get(ref, reason) != reason:  # the same entry re-exported by another module is fine
                raise ValueError(f"{name}.UNSUPPORTED: {ref!r} is listed elsewhere with another reason: {merged[ref]!r}")
            merged[ref] = reason
    return merged


def mapping_rows(schema: type = Config, unsupported: dict[str, str] | None = None) -> list[MappingRow]:
    """All rows, sorted by framework then key. A key both referenced by a field and listed as
    unsupported is a contradiction in the schema and raises ValueError."""
    unsupported = collect_unsupported() if unsupported is None else unsupported
    rows = []
    claimed: dict[str, list[str]] = defaultdict(list)
    for path, info in iter_fields(schema):
        if section_class(info.type) is not None:
            continue  # a section's refs are the prefix of its fields' relative refs, not a parameter
        for ref in info.refs:
            framework, _, key = ref.partition(":")
            claimed[ref].append(path)
            status = f"not implemented yet: {info.todo}" if info.todo else "supported"
            rows.append(MappingRow(framework, key, path, status, info.doc))
    both = sorted(set(claimed) & set(unsupported))
    if both:
        raise ValueError(f"keys both mapped by a field and listed as UNSUPPORTED: {both} (fields: {[claimed[r] for r in both]})")
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
        "Generated from the schema by `python -m posttrain.config.mapping > docs/config-mapping.md`; "
        "do not edit by hand. Each reference key is **supported** (the posttrain key means the same), "
        "**not implemented yet** (it has a home, but setting it is refused until it works), or **not "
        "supported** (with the reason). `posttrain config explain KEY` documents any posttrain key.",
        "",
        "| framework | keys | supported | not implemented yet | not supported |",
        "|---|---:|---:|---:|---:|",
    ]
    by_fw: dict[str, list[MappingRow]] = defaultdict(list)
    for row in rows:
        by_fw[row.framework].append(row)
    for fw in FRAMEWORKS:
        counts = [sum(r.status.startswith(s) for r in by_fw[fw]) for s in ("supported", "not implemented", "not supported")]
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
