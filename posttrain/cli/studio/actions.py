"""What the studio's server does for the page: check a config, import one, save one.

Every check goes through the CLI's own functions on a real file, so the page can never disagree
with `posttrain train`: the YAML is written to a temporary file and read by `load_config` (the
validator, foreign dialects included), then by `plan_text` (what `posttrain config plan` prints:
the checks `train` makes before its first step, and the batch arithmetic). Import reads a file
as `config convert` does (`posttrain.config.dialects`). Messages name the file the user will save
(``studio.yaml``), not the temporary one.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posttrain.cli.config_cmd import plan_text
from posttrain.cli.studio.form import NotYaml, compose, default_texts, field_of, field_order, flatten, parse_value, render_yaml
from posttrain.config.dialects import TITLES, detect, read_foreign
from posttrain.config.dialects.source import read_yaml
from posttrain.config.explain import yaml_scalar
from posttrain.config.load import load_config
from posttrain.errors import ConfigError, UserError
from posttrain.files import atomic_write_text

_NAME = re.compile(r"^[^\0\n]*[^/\0\n]\.ya?ml$")  # a file path ending in .yaml or .yml
_KEY = re.compile(r"(?<![\w/.\[])[a-z_]\w*(?:\.\w+|\[\d+\])+")  # a dotted key, not part of a path


def file_name(name: Any) -> str:
    """The export's file name (a path relative to where the studio runs, or absolute) as the page
    gave it, when it names a ``.yaml``/``.yml`` file; else ``studio.yaml``."""
    name = str(name or "").strip()
    return name if _NAME.match(name) else "studio.yaml"


def check_text(text: str, name: str = "studio.yaml") -> dict[str, Any]:
    """Validate a config's YAML as `posttrain train NAME` would, then plan it when it is valid:
    ``{"problems": [{"field", "fields", "message"}], "plan": text or None, "plan_error": text or None}``
    (``field``: the problem's leading key's form field; ``fields``: every field it names)."""
    name = file_name(name)
    with tempfile.TemporaryDirectory(prefix="posttrain-studio-") as tmp:
        path = Path(tmp) / Path(name).name
        path.write_text(text, encoding="utf-8")
        shown = _renamer(str(path), name)
        try:
            cfg = load_config(path)
        except ConfigError as err:
            return {"problems": [_problem(shown(p)) for p in err.problems], "plan": None, "plan_error": None}
        except UserError as err:
            return {"problems": [{"field": None, "fields": [], "message": shown(str(err))}], "plan": None, "plan_error": None}
        try:
            return {"problems": [], "plan": shown(plan_text(cfg, str(path), [])), "plan_error": None}
        except ConfigError as err:  # a check `train` makes before its first step (registry names, ...)
            return {"problems": [_problem(shown(p)) for p in err.problems], "plan": None, "plan_error": None}
        except UserError as err:  # valid, but `train` would stop before its first step: model, data
            return {"problems": [], "plan": None, "plan_error": shown(str(err))}


def check_values(values: Mapping[str, str], name: str = "studio.yaml", base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The page's form: the YAML it makes, its problems and plan, and the commands that run it."""
    tree, problems = compose(values)
    text = render_yaml(tree)
    result = {"yaml": text, "commands": commands(values, file_name(name), base)}
    if problems:
        found = [{"field": p.field, "fields": [p.field] if p.field else [], "message": p.message} for p in problems]
        return {**result, "problems": found, "plan": None, "plan_error": None}
    return {**result, **check_text(text, name)}


def _renamer(temp: str, name: str):
    """Messages say ``studio.yaml``, not the temporary path; a problem's leading ``FILE: `` goes."""
    def shown(message: str) -> str:
        return message.replace(f"{temp}: ", "", 1).replace(temp, name) if message.startswith(temp) else message.replace(temp, name)
    return shown


def _problem(message: str) -> dict[str, Any]:
    """A problem and the form fields it names: its leading key first (``field``), then every other
    key it mentions (a batch size that does not divide names both sizes)."""
    fields = list(dict.fromkeys(f for f in (field_of(k) for k in _KEY.findall(message)) if f is not None))
    leading = _KEY.match(message)
    first = field_of(leading.group(0)) if leading else None
    return {"field": first, "fields": fields, "message": message}


def commands(values: Mapping[str, str], name: str, base: Mapping[str, Any] | None) -> list[str]:
    """The `posttrain train` command lines: the saved file; and, when the page started from a file
    on this machine, that file with the changes as overrides (``key=value``, one line of YAML each)."""
    out = [shlex.join(["posttrain", "train", name])]
    if base and base.get("path"):
        before: Mapping[str, str] = base.get("values") or {}
        defaults = default_texts()
        changed = [k for k in sorted(set(values) | set(before), key=lambda k: (field_order().get(k, 10**6), k))
                   if values.get(k) != before.get(k)]
        overrides = [f"{k}={_one_line(values.get(k, defaults.get(k, '')))}" for k in changed]
        out.append(shlex.join(["posttrain", "train", str(base["path"]), *overrides]))
    return out


def _one_line(text: str) -> str:
    """A form value as one override value (a YAML block becomes flow style; empty stays null)."""
    try:
        value = parse_value(text)
    except NotYaml:
        return text
    return "" if value is None else yaml_scalar(value)


def import_config(path: str | None = None, name: str | None = None, text: str | None = None) -> dict[str, Any]:
    """Read a posttrain, verl, ROLL or Trinity-RFT file as form values: by its path on this machine
    (Hydra includes beside it resolve) or by its content (an upload). A foreign file is translated
    as `config convert` translates it; the report lists what was translated, dropped and refused."""
    if path is not None:
        return _import(Path(path), base=str(path))
    with tempfile.TemporaryDirectory(prefix="posttrain-studio-") as tmp:
        upload = Path(tmp) / Path(file_name(name)).name
        upload.write_text(text or "", encoding="utf-8")
        result = _import(upload, base=None)
        shown = _renamer(str(upload), Path(str(name or upload.name)).name)
        result["report"] = {k: [shown(x) for x in v] if isinstance(v, list) else shown(v) for k, v in result["report"].items()}
        return result


def _import(path: Path, base: str | None) -> dict[str, Any]:
    raw = read_yaml(path)
    dialect = detect(raw, str(path))
    if dialect == "native":
        report = {"summary": "posttrain config", "refused": [], "dropped": [], "translated": []}
        return {"values": flatten(raw), "dialect": "posttrain", "base": base, "report": report}
    foreign = read_foreign(path, dialect, raw)
    rep = foreign.report
    report = {
        "summary": rep.summary(),
        "refused": [e.line() for e in rep.refused],
        "dropped": [e.line() for e in rep.of("dropped")],
        "translated": [f"{e.key} -> {e.native}" for e in rep.of("translated")],
    }
    # `posttrain train FILE key=value` reads a foreign file too, unless it has keys posttrain refuses
    return {"values": flatten(foreign.native), "dialect": TITLES[dialect], "base": None if rep.refused else base,
            "report": report}


def save(values: Mapping[str, str], path: str, overwrite: bool = False) -> dict[str, Any]:
    """Write the form's config to ``path`` (relative to where the studio runs). An existing file is
    kept unless ``overwrite``; a value that is not YAML writes nothing."""
    tree, problems = compose(values)
    if problems:
        raise ConfigError([p.message for p in problems])
    target = Path(path).expanduser()
    if not path or target.is_dir():
        raise UserError(f"{path!r}: give a file name to save the config to, e.g. studio.yaml")
    if target.exists() and not overwrite:
        return {"saved": None, "exists": str(target)}
    atomic_write_text(target, render_yaml(tree))
    return {"saved": str(target), "exists": None}


__all__ = ["check_text", "check_values", "commands", "file_name", "import_config", "save"]
