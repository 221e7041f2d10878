"""A verl launch line as a config: verl's default trainer tree, an optional YAML, Hydra overrides.

verl users start a run as ``python3 -m verl.trainer.main_ppo KEY=VALUE ...``: Hydra overrides of
verl's PPO trainer config (verl_defaults.yaml here: its keys and defaults). ``posttrain train
--dialect verl KEY=VALUE ...`` reads the same words. A key the tree does not have is an error
unless added with ``+``, as in Hydra; ``--config-path DIR --config-name NAME`` puts the user's YAML
(whose ``defaults`` name verl's ``ppo_trainer``) between the tree and the overrides.

verl has two trainer trees: ``ppo_trainer`` (FSDP) and ``ppo_megatron_trainer`` (Megatron: each
role's ``megatron`` section, Megatron's optimizer and scheduler keys, its own defaults). A line with
``--config-name ppo_megatron_trainer``, or a user YAML whose ``defaults`` name it, starts from the
second (verl_megatron_defaults.yaml): a key that tree lacks is an error as Hydra makes it, and its
``megatron`` keys translate onto posttrain's FSDP2 (posttrain.config.dialects.verl_megatron).

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

from posttrain.config.dialects import hydra, verl_moved
from posttrain.config.dialects.index import native_paths
from posttrain.config.dialects.report import Report
from posttrain.config.dialects.source import compose, read_yaml, references, resolve
from posttrain.config.dialects.source import leaves as dotted_leaves
from posttrain.config.dialects.verl_release import reading
from posttrain.config.dialects.verl_trees import FILES, NEWEST, SFT, defaults_tree, releases_of
from posttrain.errors import ConfigError

MEGATRON = "ppo_megatron_trainer"
VEOMNI = "ppo_veomni_trainer"  # verl 0.10's VeOmni engine (`model_engine=veomni`): posttrain.config.dialects.verl_veomni
DEFAULTS_FILE = FILES[("ppo_trainer", NEWEST)]
BASES = frozenset(base for base, _ in FILES)
WHATS = {"ppo_trainer": "verl's trainer config", MEGATRON: "verl's Megatron trainer config", VEOMNI: "verl's VeOmni trainer config",
         SFT: "verl's SFT trainer config"}
WHAT = WHATS["ppo_trainer"]
# verl 0.10's `model_engine` choice (a Hydra group of its ppo_trainer.yaml) -> the tree it composes
ENGINES = {"dp": "ppo_trainer", "megatron": MEGATRON, "veomni": VEOMNI}
MEGATRON_STRATEGIES = ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy")
# Always part of a line of each tree, so that the translation knows which tree the line is.
# The SFT tree's conversation column too: read only when the line turns multiturn.enable on (verl_sft).
# Its tools_key ('tools') is read by verl only where the data has that column; posttrain reads a tool
# column the line names (and then wants it in the data), so the default is not carried over.
ALWAYS = {MEGATRON: MEGATRON_STRATEGIES, VEOMNI: MEGATRON_STRATEGIES, SFT: ("model.partial_pretrain", "data.multiturn.messages_key", "data.multiturn.enable_thinking_key")}
# Defaults that describe verl's machine (8 accelerators per node, CUDA, 8 data-loading processes),
# not the run: posttrain sizes the run to the machine it is on unless the line names them (the
# loading processes change where a batch is tokenised, never what it holds).
MACHINE_DEFAULTS = frozenset({"trainer.device", "trainer.n_gpus_per_node", "trainer.nnodes", "data.dataloader_num_workers"})


def _base_name(entry: Any) -> str | None:
    """The verl tree a ``defaults`` entry (``ppo_trainer``, ``ppo_megatron_trainer.yaml``) names, if any."""
    if not isinstance(entry, str):
        return None
    name = entry.split("@")[0].strip()
    name = name[: -len(".yaml")] if name.endswith(".yaml") else name
    return name if name in BASES else None


def builtin(path: str | Path | None) -> str | None:
    """The verl tree that ``--config-name`` names when no such file is here (verl's own config
    directory), else None: ``config/ppo_megatron_trainer.yaml`` -> ppo_megatron_trainer."""
    if path is None or Path(path).is_file():
        return None
    return _base_name(Path(path).name)


def user_file(path: str | Path, problems: dict[str, str]) -> tuple[dict[str, Any], str]:
    """``(composed YAML, the verl tree it goes on top of)`` of a verl YAML (``--config-name``, or a file
    given with ``--dialect verl``): its ``defaults`` entry naming ppo_trainer or ppo_megatron_trainer is
    the tree (ppo_trainer when none does); other entries are included."""
    path = Path(path)
    raw = read_yaml(path)
    defaults = raw.get("defaults")
    base = "ppo_trainer"
    if isinstance(defaults, list):
        named = [_base_name(d) for d in defaults if _base_name(d)]
        base = named[-1] if named else base
        raw = {**raw, "defaults": [d for d in defaults if not _base_name(d)]}
    composed = compose(raw, path, problems)
    return {k: v for k, v in composed.items() if k not in ("defaults", "hydra")}, base


def _tree(leaves: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in leaves.items():
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


@functools.lru_cache(maxsize=8)
def honoured_defaults(base: str = "ppo_trainer", release: str | None = None) -> frozenset[str]:
    """verl's default keys (of tree ``base``) that translate onto a posttrain field whose own default
    differs, or that interpolate another key (their value then follows the user's override)."""
    from posttrain.config.dialects import translate

    raw = dotted_leaves(defaults_tree(base, release))
    resolved, _ = resolve(defaults_tree(base, release))
    # translated without verl's machine (MACHINE_DEFAULTS), as the line is: no sharded worker processes
    machine_free = _tree({k: v for k, v in dotted_leaves(resolved).items() if k not in MACHINE_DEFAULTS})
    with reading(release or releases_of(base)[0]):
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
    base, mine = builtin(path) or "ppo_trainer", {}
    if path is not None and builtin(path) is None:
        mine, base = user_file(path, problems)
    overrides, engine, engine_word = _engine(overrides)
    base = ENGINES.get(engine, base) if engine is not None else base
    release, tree, set_by = _read(base, mine, overrides, engine)
    if engine_word is not None:
        tree["model_engine"], set_by["model_engine"] = engine, engine_word
    user: set[str] = set(dotted_leaves(mine)) | set(set_by)
    resolved, unresolved = resolve(tree)
    leaves = dotted_leaves(resolved)
    always = ALWAYS.get(base, ())
    chosen = {k: v for k, v in leaves.items() if _owner(k, user) or k in always or (k in honoured_defaults(base, release) and v is not None)}
    unresolved = {k: why for k, why in unresolved.items() if _owner(k, user)}
    while True:
        with reading(release):
            native, report = translate(_tree(chosen), "verl", interpolated=references(tree), unresolved={**problems, **unresolved})
        report.framework_release = release
        # a default that posttrain refuses, that stands in the way of the user's key, or whose value
        # posttrain's validation rejects with the user's other keys (verl's use_torch_compile with
        # several worker processes), leaves
        blocking = {e.key for e in report.refused if not _owner(e.key, user) and e.key not in always}
        blocking |= {key for key in _invalid(native, report) if not _owner(key, user)}
        blocking |= {other for e in report.refused if _owner(e.key, user) for other in _conflict(e.reason) if not _owner(other, user)}
        blocking &= set(chosen)
        if not blocking:
            return native, report, set_by
        chosen = {k: v for k, v in chosen.items() if k not in blocking}


def _engine(overrides: list[str]) -> tuple[list[str], str | None, str | None]:
    """``(the other overrides, the engine, its word)`` of a line's ``model_engine=NAME`` (verl 0.10's
    choice of the training engine's trees: ENGINES); a name verl has but posttrain does not read is
    one error saying so."""
    rest, engine, word = [], None, None
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") == "model_engine":
            engine, word = value.strip().strip("'\""), item
            continue
        rest.append(item)
    if engine is not None and engine not in ENGINES:
        why = ("verl's TorchTitan engine, whose trainer tree posttrain does not read: use model_engine=dp (FSDP), megatron or veomni"
               if engine == "torchtitan" else f"{engine or 'a blank name'}: verl 0.10's model_engine is one of dp, megatron, veomni, torchtitan")
        raise ConfigError(f"command line override {word!r}: model_engine: {why}")
    return rest, engine, word


def _read(base: str, mine: Mapping[str, Any], overrides: list[str], engine: str | None) -> tuple[str, dict[str, Any], dict[str, str]]:
    """``(release, tree, {key: override})``: the line read with the newest verl release whose ``base``
    tree has every key it sets and that reads them all (verl_moved.NOT_READ), as the verl it was
    written for would read it; failing the second, the newest whose tree has them. A line no release
    reads fails with the problems of the release it fits best (fewest problems, the newest on a tie).
    ``model_engine`` exists from 0.10 on, so a line naming it is read with 0.10 or newer."""
    releases = [r for r in releases_of(base) if engine is None or r != "0.8"]
    failures: list[tuple[int, int, ConfigError]] = []
    first: tuple[str, dict[str, Any], dict[str, str]] | None = None
    user = set(dotted_leaves(mine))
    for order, release in enumerate(releases):
        try:
            tree, set_by = hydra.apply(_merge(defaults_tree(base, release), mine), overrides, strict=True, what=WHATS[base], launcher="verl")
        except ConfigError as err:
            failures.append((len(err.problems), order, err))
            continue
        # a line that sets a key this release no longer reads was written for an older one
        keys = user | set(set_by)
        if not verl_moved.unread(_tree({k: v for k, v in dotted_leaves(tree).items() if _owner(k, keys)}), release):
            return release, tree, set_by
        first = first or (release, tree, set_by)
    if first is not None:
        return first
    raise min(failures, key=lambda f: f[:2])[2]


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
    if builtin(path) in (MEGATRON, SFT):
        return f"verl's default ({builtin(path)}): "
    return f"{path}: " if path is not None and builtin(path) is None else "verl's default: "


__all__ = ["BASES", "DEFAULTS_FILE", "ENGINES", "FILES", "MEGATRON", "SFT", "VEOMNI", "builtin", "defaults_tree", "honoured_defaults", "launch", "locate", "releases_of"]
