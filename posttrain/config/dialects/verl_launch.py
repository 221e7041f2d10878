"""A verl launch line as a config: verl's default trainer tree, an optional YAML, Hydra overrides.

verl users start a run as ``python3 -m verl.trainer.main_ppo KEY=VALUE ...``: Hydra overrides of
verl's PPO trainer config (verl_defaults.yaml here: its keys and defaults). ``posttrain train
--dialect verl KEY=VALUE ...`` reads the same words. A key the tree does not have is an error
unless added with ``+``, as in Hydra; ``--config-path DIR --config-name NAME`` puts the user's YAML
(whose ``defaults`` name verl's ``ppo_trainer``) between the tree and the overrides.

What is translated: every key the user set (file or override), and each of verl's defaults that
lands on a posttrain field with a different default of its own (``actor.optim.lr`` 1e-6, ``rollout.n``
1, ``adv_estimator`` gae, ...), so the run gets verl's defaults. A default that posttrain cannot
honour is not the user's doing and is left out (the user's own keys are refused as usual); where a
user's key and a verl default land on one posttrain key, the user's wins.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from posttrain.config.dialects import hydra
from posttrain.config.dialects.index import native_paths
from posttrain.config.dialects.report import Report
from posttrain.config.dialects.source import compose, read_yaml, references, resolve
from posttrain.config.dialects.source import leaves as dotted_leaves

DEFAULTS_FILE = Path(__file__).with_name("verl_defaults.yaml")
WHAT = "verl's trainer config"
_BASE_NAMES = ("ppo_trainer", "ppo_trainer.yaml")  # a user YAML's `defaults` entry naming verl's tree
# Defaults that describe verl's machine (8 accelerators per node, CUDA, 8 data-loading processes),
# not the run: posttrain sizes the run to the machine it is on unless the line names them (the
# loading processes change where a batch is tokenised, never what it holds).
MACHINE_DEFAULTS = frozenset({"trainer.device", "trainer.n_gpus_per_node", "trainer.nnodes", "data.dataloader_num_workers"})


@functools.lru_cache(maxsize=1)
def defaults_tree() -> dict[str, Any]:
    """verl's trainer config: every key and its default (interpolations unresolved)."""
    return yaml.safe_load(DEFAULTS_FILE.read_text())


def user_file(path: str | Path, problems: dict[str, str]) -> dict[str, Any]:
    """A verl YAML (``--config-name``, or a file given with ``--dialect verl``) composed: its
    ``defaults`` entries naming verl's ppo_trainer are the tree it goes on top of; others are included."""
    path = Path(path)
    raw = read_yaml(path)
    defaults = raw.get("defaults")
    if isinstance(defaults, list):
        kept = [d for d in defaults if not (isinstance(d, str) and d.split("@")[0] in _BASE_NAMES)]
        raw = {**raw, "defaults": kept}
    composed = compose(raw, path, problems)
    return {k: v for k, v in composed.items() if k not in ("defaults", "hydra")}


def _tree(leaves: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in leaves.items():
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


@functools.lru_cache(maxsize=1)
def honoured_defaults() -> frozenset[str]:
    """verl's default keys that translate onto a posttrain field whose own default differs, or that
    interpolate another key (their value then follows the user's override)."""
    from posttrain.config.dialects import translate

    raw = dotted_leaves(defaults_tree())
    resolved, _ = resolve(defaults_tree())
    # translated without verl's machine (MACHINE_DEFAULTS), as the line is: no sharded worker processes
    machine_free = _tree({k: v for k, v in dotted_leaves(resolved).items() if k not in MACHINE_DEFAULTS})
    _, report = translate(machine_free, "verl")
    infos = native_paths()
    keep = set()
    for entry in report.of("translated"):
        info = infos.get(entry.native)
        differs = info is None or not info.has_default() or info.default() != entry.value
        if entry.key in raw and entry.key not in MACHINE_DEFAULTS and entry.value is not None and (differs or "${" in str(raw[entry.key])):
            keep.add(entry.key)
    return frozenset(keep)


def _owner(key: str, user: set[str]) -> bool:
    return any(key == k or key.startswith(k + ".") for k in user)


def launch(path: str | Path | None, overrides: list[str]) -> tuple[dict[str, Any], Report, dict[str, str]]:
    """``(native dict, report, {foreign key: the override that set it})`` of a verl launch line;
    ConfigError for a bad override or an unreadable file."""
    from posttrain.config.dialects import translate

    problems: dict[str, str] = {}
    tree = defaults_tree()
    user: set[str] = set()
    if path is not None:
        mine = user_file(path, problems)
        user |= set(dotted_leaves(mine))
        tree = _merge(tree, mine)
    tree, set_by = hydra.apply(tree, overrides, strict=True, what=WHAT)
    user |= set(set_by)
    resolved, unresolved = resolve(tree)
    leaves = dotted_leaves(resolved)
    chosen = {k: v for k, v in leaves.items() if _owner(k, user) or (k in honoured_defaults() and v is not None)}
    unresolved = {k: why for k, why in unresolved.items() if _owner(k, user)}
    while True:
        native, report = translate(_tree(chosen), "verl", interpolated=references(tree), unresolved={**problems, **unresolved})
        # a default that posttrain refuses, that stands in the way of the user's key, or whose value
        # posttrain's validation rejects with the user's other keys (verl's use_torch_compile with
        # several worker processes), leaves
        blocking = {e.key for e in report.refused if not _owner(e.key, user)}
        blocking |= {key for key in _invalid(native, report) if not _owner(key, user)}
        blocking |= {other for e in report.refused if _owner(e.key, user) for other in _conflict(e.reason) if not _owner(other, user)}
        blocking &= set(chosen)
        if not blocking:
            return native, report, set_by
        chosen = {k: v for k, v in chosen.items() if k not in blocking}


def _invalid(native: dict[str, Any], report: Report) -> set[str]:
    """The foreign keys whose translated values native validation names in a problem."""
    from posttrain.config.schema import defaults_dict
    from posttrain.config.validate import deep_merge, validate
    from posttrain.errors import ConfigError

    try:
        validate(deep_merge(defaults_dict(), native))
    except ConfigError as err:
        origin = report.native_origin()
        return {origin[p.split(" ", 1)[0].rstrip(":")] for p in err.problems if p.split(" ", 1)[0].rstrip(":") in origin}
    return set()


def _conflict(reason: str) -> list[str]:
    """The other key of a "conflicts with KEY (...)" refusal."""
    prefix = "conflicts with "
    return [reason[len(prefix):].split(" ", 1)[0]] if reason.startswith(prefix) else []


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    from posttrain.config.validate import deep_merge

    return deep_merge(base, over)


def locate(key: str, set_by: Mapping[str, str], path: str | Path | None) -> str:
    """Where a foreign key came from, as the start of a message."""
    text = hydra.origin(key, set_by)
    if text is not None:
        return f"command line override {text!r}: "
    return f"{path}: " if path is not None else "verl's default: "


__all__ = ["DEFAULTS_FILE", "defaults_tree", "honoured_defaults", "launch", "locate"]
