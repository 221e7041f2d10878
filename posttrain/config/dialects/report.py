"""The outcome of translating one foreign config: for every foreign key, where it went or why not.

Three outcomes, and no fourth (a key is never silently lost):

- ``translated``: the value now lives at a posttrain key (maybe converted: ``bfloat16`` -> ``bf16``);
- ``dropped``: the key does nothing in posttrain and is left out, with the reason (a Hydra launcher
  setting, an interpolation helper whose value was substituted, a null, a per-role setting posttrain
  takes from the policy's and that agrees with it);
- ``refused``: the key would change the run and posttrain cannot honour it: the schema's reason
  (``UNSUPPORTED`` or a field's ``todo``), or no home at all. Loading such a file fails; converting
  it writes the rest with these listed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import yaml

from posttrain.config.dialects.detect import TITLES
from posttrain.config.dialects.machine import absent_here


@dataclasses.dataclass(frozen=True)
class Entry:
    """One foreign key's fate. ``value`` is the native value (or the foreign one when refused
    without a native home); ``native`` is the posttrain key, when it has one."""

    key: str
    status: str  # "translated" | "dropped" | "refused"
    native: str | None = None
    value: Any = None
    reason: str = ""

    def line(self) -> str:
        """``key -> native: reason`` as one line of a report or an error message."""
        where = f" (posttrain: {self.native})" if self.native else ""
        return f"{self.key}{where}: {self.reason}" if self.reason else f"{self.key}{where}"


@dataclasses.dataclass
class Report:
    """Every entry of one translation, in the order the keys were met."""

    dialect: str
    entries: list[Entry] = dataclasses.field(default_factory=list)
    # devices per node taken from this machine because the file left the count to its framework's
    # default, and that default (posttrain.config.dialects.machine); None when the file names it
    devices_from_machine: int | None = None
    framework_devices_per_node: int | None = None
    # the framework's release whose configuration the file was read as (verl: posttrain.config.dialects.verl_trees.RELEASES)
    framework_release: str | None = None

    def add(self, entry: Entry) -> None:
        """Record an outcome; the same outcome reached twice (one key read by two handlers' paths,
        such as a workflow type the taskset and its evaluation sets share) is listed once."""
        if entry not in self.entries:
            self.entries.append(entry)

    def of(self, status: str) -> list[Entry]:
        return [e for e in self.entries if e.status == status]

    @property
    def refused(self) -> list[Entry]:
        return self.of("refused")

    def entry(self, key: str) -> Entry | None:
        """The last entry for a foreign key (tests and users look keys up by name)."""
        found = [e for e in self.entries if e.key == key]
        return found[-1] if found else None

    def native_origin(self) -> dict[str, str]:
        """posttrain key -> the foreign key it came from (for naming the foreign key in errors)."""
        return {e.native: e.key for e in self.entries if e.status == "translated" and e.native}

    def counts(self) -> str:
        """``"55 keys translated, 14 dropped, 29 refused"``."""
        n = {s: len(self.of(s)) for s in ("translated", "dropped", "refused")}
        return f"{n['translated']} keys translated, {n['dropped']} dropped, {n['refused']} refused"

    def title(self) -> str:
        """The framework's name, with the release read when the dialect has several (``verl 0.10``)."""
        return f"{TITLES[self.dialect]} {self.framework_release}" if self.framework_release else TITLES[self.dialect]

    def summary(self) -> str:
        return f"{self.title()} config: {self.counts()}"

    def comment_block(self, problems: list[str] = ()) -> str:
        """The report as YAML comments, for the head of a converted file."""
        out = [f"# Converted by `posttrain config convert` from a {TITLES[self.dialect]} config.", f"# {self.summary()}."]
        if problems:
            out += ["#", "# The converted config does not validate yet (fix these, then `posttrain config show FILE`):"]
            out += [_commented(p) for p in problems]
        here = [e for e in self.refused if absent_here(e)]
        if here:
            out += ["#", "# NOT ON THIS MACHINE (kept as written below: `config plan` and `train` read them where the files are):"]
            out += [_commented(e.line()) for e in here]
        refused = [e for e in self.refused if not absent_here(e)]
        if refused:
            out += ["#", "# REFUSED (left out: posttrain cannot honour them; a native key, where shown, is commented out below):"]
            out += [_commented(e.line()) for e in refused]
        dropped = self.of("dropped")
        if dropped:
            out += ["#", "# DROPPED (no effect in posttrain):"]
            out += [_commented(e.line()) for e in dropped]
        translated = self.of("translated")
        if translated:
            out += ["#", "# TRANSLATED (foreign key -> posttrain key):"]
            out += [_commented(f"{e.key} -> {e.native}" + (f"  ({e.reason})" if e.reason else "")) for e in translated]
        return "\n".join(out) + "\n"

    def refused_native_yaml(self) -> str:
        """Refused values that have a native key, as commented-out YAML lines (``# rollout.name: vllm``)."""
        lines = []
        for e in self.refused:
            if e.native and not absent_here(e):  # a data path missing here is in the body (`keep_absent_data`)
                value = yaml.safe_dump(e.value, default_flow_style=True, width=10**6).strip()
                value = value.removesuffix("\n...").removesuffix("...").strip()
                if "\n" in value:  # JSON is YAML too, and always one line: the value stays inside this comment
                    value = json.dumps(e.value, ensure_ascii=False, default=str)
                lines.append(_commented(f"{e.native}: {value}    # from {e.key}", indent="# "))
        if not lines:
            return ""
        return "\n# Refused settings, at their posttrain keys (uncomment once supported):\n" + "\n".join(lines) + "\n"


def keep_absent_data(native: dict[str, Any], report: Report) -> dict[str, Any]:
    """``native`` with the data paths that are refused only because they are not on this machine put
    back (appended to their lists), so that a file converted on a laptop still names its cluster's data."""
    out = copy.deepcopy(native)
    for e in report.refused:
        if absent_here(e):
            section, key = e.native.rsplit(".", 1)
            node = out
            for part in section.split("."):
                node = node.setdefault(part, {})
            values = node.get(key) if isinstance(node.get(key), list) else []
            node[key] = values + [v for v in (e.value if isinstance(e.value, list) else [e.value]) if v not in values]
    return out


def _commented(text: str, indent: str = "#   ") -> str:
    """``text`` as YAML comment lines, however many lines it has (a message may quote a
    multi-line value; an uncommented continuation would break the converted file)."""
    lines = str(text).splitlines() or [""]
    return "\n".join([indent + lines[0]] + [f"#     {line}" for line in lines[1:]])
