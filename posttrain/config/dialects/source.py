"""Reading a foreign config file: YAML, Hydra's ``defaults`` list, then interpolations key by key.

verl and ROLL configs are Hydra configs: ``defaults: [../config/traj_envs@_here_]`` merges another
file first, then the file's own keys over it (Hydra's rule when ``_self_`` is not listed). Only file
includes are composed here (``path``, ``path@_here_``/``@_global_`` at the root, ``path@pkg`` under
``pkg``, ``{group: option}`` as ``group/option.yaml`` under ``group``); an include that is missing
is reported on its ``defaults[i]`` key, not fatal, so a converter can still write the rest.

Interpolations (``${exp_name}``, ``${oc.env:VAR,default}``) are resolved by OmegaConf, one key at a
time, so a key that cannot be resolved (an unset environment variable, a name from a missing
include) is refused by name while every other key still translates.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posttrain.config.validate import deep_merge
from posttrain.errors import ConfigError
from posttrain.files import read_utf8

_MISSING_ENV = re.compile(r"Environment variable '([^']+)' not found")
_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_][\w.]*)\s*\}")  # ${a.b}, not ${resolver:...}


def leaves(tree: Mapping[str, Any], prefix: str = "", whole: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``: every non-empty mapping is walked into, except the dotted
    keys in `whole` (mappings that are one value, such as a function's keyword arguments)."""
    out: dict[str, Any] = {}
    for name, value in tree.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and value and key not in whole:
            out.update(leaves(value, key + ".", whole))
        else:
            out[key] = value
    return out


def read_yaml(path: Path) -> dict[str, Any]:
    """The file as plain data, interpolations untouched; one clear error for a bad file. Every
    config file is read here: posttrain's own (`posttrain.config.load`) and foreign ones."""
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    text = read_utf8(path, ConfigError)
    try:
        conf = OmegaConf.load(io.StringIO(text))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}:{where}: invalid YAML: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(conf, DictConfig):
        raise ConfigError(f"{path}: the top level must be a mapping of sections (data:, actor:, ...), not a list")
    return OmegaConf.to_container(conf, resolve=False)  # type: ignore[return-value]


def compose(raw: dict[str, Any], path: Path, problems: dict[str, str], _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Merge the Hydra ``defaults`` includes of ``raw`` (read from ``path``) under its own keys.
    Problems go to ``problems`` as ``{"defaults[i]": why}``; the ``defaults`` key itself is kept."""
    defaults = raw.get("defaults")
    if not isinstance(defaults, list):
        return raw
    merged: dict[str, Any] = {}
    own_at = len(defaults)  # without _self_, the file's own keys come last (they win)
    for i, item in enumerate(defaults):
        if item == "_self_":
            own_at = i
            continue
        name, package = _include(item)
        if name is None:
            problems[f"defaults[{i}]"] = f"Hydra default {item!r} is not a file include; posttrain composes file includes only: inline its keys"
            continue
        file = (path.parent / name).with_suffix(".yaml") if not name.endswith((".yaml", ".yml")) else path.parent / name
        if not file.is_file():
            # ROLL's examples still include DeepSpeed presets that ROLL v0.3.0 deleted
            gone = ("; ROLL v0.3.0 removed its DeepSpeed presets (examples/config/deepspeed_zero*.yaml), so ROLL stops with the same "
                    "missing include: copy it from ROLL v0.2, or remove the include if no strategy_config uses it") if file.name.startswith("deepspeed_zero") else ""
            problems[f"defaults[{i}]"] = f"Hydra include {item!r}: {file} not found (put it there, or inline its keys){gone}"
            continue
        if file.resolve() in _seen:
            problems[f"defaults[{i}]"] = f"Hydra include {item!r} includes itself"
            continue
        sub = compose(read_yaml(file), file, problems, _seen + (path.resolve(),))
        sub = {k: v for k, v in sub.items() if k != "defaults"}
        part = sub if package is None else {package: sub}
        if i > own_at:  # included after _self_: it wins over the file's own keys
            raw = deep_merge(raw, part)
        else:
            merged = deep_merge(merged, part)
    return deep_merge(merged, raw)


def _include(item: Any) -> tuple[str | None, str | None]:
    """``(file name, package or None for the root)`` of one defaults-list entry."""
    if isinstance(item, Mapping) and len(item) == 1:
        group, option = next(iter(item.items()))
        if isinstance(option, str) and isinstance(group, str) and not group.startswith("override "):
            group, _, package = group.partition("@")
            return f"{group}/{option}", (_package(package) if package else group.replace("/", "."))
        return None, None
    if isinstance(item, str) and item:
        name, _, package = item.partition("@")
        return name, _package(package)
    return None, None


def _package(package: str) -> str | None:
    return None if package in ("", "_here_", "_global_") else package


def references(raw: Any) -> set[str]:
    """Every key named by a plain interpolation (``${a.b}``) in ``raw``'s string values."""
    out: set[str] = set()
    if isinstance(raw, Mapping):
        for v in raw.values():
            out |= references(v)
    elif isinstance(raw, list):
        for v in raw:
            out |= references(v)
    elif isinstance(raw, str):
        out |= {m.group(1).lstrip(".") for m in _REFERENCE.finditer(raw)}
    return out


def _now(pattern: str = "%Y-%m-%d_%H-%M-%S") -> str:
    """Hydra's ``${now:FORMAT}`` resolver (verl and ROLL compose with Hydra): the local time, strftime."""
    return time.strftime(pattern)


def _register_resolvers() -> None:
    """The resolvers real configs use beyond OmegaConf's own (``oc.env``, ``oc.select``, ...): only
    Hydra's ``now``. verl, ROLL and Trinity-RFT register none of their own, so there is no arithmetic
    resolver to mirror; an unknown one (``${eval:...}``) is refused on its key, naming it."""
    if not OmegaConf.has_resolver("now"):
        register = getattr(OmegaConf, "register_resolver", None) or OmegaConf.register_new_resolver  # 2.4 renamed it
        register("now", _now, use_cache=True)  # one time per run, as Hydra's


def resolve(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Interpolations resolved key by key: ``(resolved dict, {key: why it could not be resolved})``.
    An unresolved leaf keeps its ``${...}`` text."""
    _register_resolvers()
    failures: dict[str, str] = {}
    conf = OmegaConf.create(raw)
    return _resolve_node(conf, "", failures), failures


def _resolve_node(node: DictConfig | ListConfig, prefix: str, failures: dict[str, str]) -> Any:
    is_list = isinstance(node, ListConfig)
    keys = range(len(node)) if is_list else list(node.keys())
    out: Any = [] if is_list else {}
    for k in keys:
        key = f"{prefix}[{k}]" if is_list else (f"{prefix}.{k}" if prefix else str(k))
        try:
            value = node[k]
        except OmegaConfBaseException as err:
            message = str(err).strip().splitlines()[0]
            text = node._get_node(k)._value()
            missing = _MISSING_ENV.search(message)
            if missing:  # one line naming the variable and the two ways out
                name = missing.group(1)
                failures[key] = (f"environment variable {name} is not set (read by {text!r}): export {name}=..., "
                                 f"or give the file a default: ${{oc.env:{name},DEFAULT}}")
            else:
                failures[key] = f"cannot resolve interpolation {text!r}: {message}"
            value = node._get_node(k)._value()
        if isinstance(value, (DictConfig, ListConfig)):
            value = _resolve_node(value, key, failures)
        if is_list:
            out.append(value)
        else:
            out[k] = value
    return out


def hydra_ignorable(ctx: Any, key: str, value: Any) -> str | None:
    """Hydra's own keys (verl and ROLL launch through Hydra): they configure the launcher, not the run."""
    if key.split(".")[0] == "hydra":
        return "Hydra launcher setting (run directory, output subdirectory); posttrain writes to trainer.default_local_dir"
    if key == "defaults":
        return "Hydra defaults list: its includes are merged in (a missing one is refused on its own key)"
    if key.rsplit(".", 1)[-1] == "_target_":
        return "Hydra's class path of the framework's own config class for this section; posttrain's schema types it"
    return None
