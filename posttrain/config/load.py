"""From a YAML file and ``a.b.c=value`` overrides to a validated `Config`, and back to YAML.

Pipeline: schema defaults ← YAML file ← overrides (per-stage ones too: `posttrain.config.overrides`), merged key by key (a mapping merges into a
mapping, anything else replaces — the same rule as for `stages`); interpolations
(``${data.max_prompt_length}``, ``${oc.env:VAR,default}``) resolved by OmegaConf — it is the
convention of verl and Trinity, so their users' files work unchanged; the resulting plain dict is
handed to `posttrain.config.validate.validate`, which owns every check.

The file is merged over the schema's defaults (as plain, untyped data) so an interpolation may
point at a key the user did not write. OmegaConf's own typed ("structured") mode is not used: its
error messages would replace ours, which carry the full path, the value and the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posttrain.config.dialects import foreign_native, native_dict
from posttrain.config.dialects.source import read_yaml
from posttrain.config.overrides import apply_overrides, locate
from posttrain.config.schema import Config, defaults_dict
from posttrain.config.validate import deep_merge, validate
from posttrain.errors import ConfigError
from posttrain.files import SafeDumper, atomic_write_text


def load_config(path: str | Path | None, overrides: Sequence[str] = (), schema: type = Config, *, dialect: str | None = None) -> Any:
    """Read, override, resolve and validate a config. ``path=None`` starts from the defaults.

    With ``dialect`` (verl, roll, trinity) the file and the overrides are that framework's, Hydra
    style (``+key=v``, ``~key``): a verl launch line needs no file (verl's own defaults are the base,
    `posttrain.config.dialects.verl_launch`); the result is translated, then validated.

    Validation problems name where the value came from: the config file
    (``examples/grpo.yaml: actor.optim.lr: ...``) or, for a key set by an override, that override
    as typed (``command line override 'rollout.n=0': rollout.n: ...``; see `posttrain.config.overrides`).
    """
    raw = load_raw(path, overrides, schema, dialect=dialect)
    try:
        return validate(raw, schema)
    except ConfigError as err:
        stages = raw.get("stages") if isinstance(raw, dict) else None
        native_overrides = () if dialect else overrides  # foreign overrides name foreign keys
        raise ConfigError([locate(p, path, native_overrides, stages) for p in err.problems]) from None


def load_raw(path: str | Path | None, overrides: Sequence[str] = (), schema: type = Config, *, dialect: str | None = None) -> dict[str, Any]:
    """The merged and resolved config as a plain dict, not yet validated."""
    merged = defaults_dict(schema)
    if dialect is not None:
        merged = deep_merge(merged, foreign_native(dialect, path, list(overrides)))
        return _resolve(merged, path, (), merged.get("stages"))
    if path is not None:
        raw = read_yaml(Path(path))
        # a verl/ROLL/Trinity-RFT file is translated first (or refused, every refused key named)
        merged = deep_merge(merged, native_dict(raw, path) if schema is Config else raw)
    if overrides:
        merged = apply_overrides(merged, overrides)
    return _resolve(merged, path, overrides, merged.get("stages"))


def _interpolates(value: Any) -> bool:
    """Whether any string in `value` holds an interpolation (or an escaped one) for OmegaConf."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(_interpolates(v) for v in value.values())
    if isinstance(value, list):
        return any(_interpolates(v) for v in value)
    return False


def _resolve(merged: dict[str, Any], path: str | Path | None, overrides: Sequence[str], stages: Any) -> dict[str, Any]:
    if not _interpolates(merged):  # the round trip through OmegaConf is most of a load's time
        return merged
    try:
        return OmegaConf.to_container(OmegaConf.create(merged), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        message = _first_line(err)
        if "Environment variable" in message:
            message += "; set it, or give a default: ${oc.env:NAME,default}"
        raise ConfigError(locate(f"{key}: cannot resolve interpolation: {message}", path, overrides, stages)) from None


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config (or any section) as plain nested dicts and lists, every field included."""
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Any) -> str:
    """The resolved config as YAML, in schema order; loading it back gives an equal config."""
    return yaml.dump(to_dict(cfg), Dumper=SafeDumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def save_resolved(cfg: Any, run_dir: str | Path, derived: Any = None) -> Path:
    """Write ``run_dir/config.yaml`` atomically (temp file + rename, so a crash never leaves a
    half-written config beside checkpoints). Derived numbers, if given, are appended as comments:
    they document the run without changing what the file loads as."""
    text = to_yaml(cfg)
    if derived is not None:
        lines = [f"#   {k}: {v}" for k, v in dataclasses.asdict(derived).items()]
        text += "# derived (computed at start, not read back):\n" + "\n".join(lines) + "\n"
    return atomic_write_text(Path(run_dir) / "config.yaml", text)


__all__ = ["load_config", "load_raw", "to_dict", "to_yaml", "save_resolved"]
