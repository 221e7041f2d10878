"""How many keys of each framework's configuration surface have no home at a changed value.

A key "has a home" when a file that sets it to another value than its default gets it translated,
dropped with the reason or refused with the reason; a key without one is refused as "not a ...
key the schema knows" (issue 18: a real key is never that). Defaults alone say nothing: a key at
its framework's default is accepted whether or not posttrain knows it.

- verl: every leaf of the trainer trees posttrain carries (posttrain.config.dialects.verl_trees),
  one key changed at a time (a bool flipped, a number moved, a string or list replaced).
- ROLL and Trinity-RFT (with ``--roll`` / ``--trinity`` checkouts): the fields of their config
  dataclasses (ROLL's RLVRConfig, Trinity-RFT's Config), imported from the checkout, nested
  dataclasses walked, each field changed alone in a minimal file.

    python benchmarks/key_homes.py [--roll ROLL_CHECKOUT] [--trinity TRINITY_CHECKOUT] [--list]

Prints, per surface, the keys tried and those without a home (with --list, their names).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import logging
import sys
import typing
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from posttrain.config.dialects import translate  # noqa: E402
from posttrain.config.dialects.source import leaves, resolve  # noqa: E402
from posttrain.config.dialects.verl_release import reading  # noqa: E402
from posttrain.config.dialects.verl_trees import defaults_tree  # noqa: E402

VERL_TREES = [("ppo_trainer", "0.10"), ("ppo_trainer", "0.8"), ("ppo_megatron_trainer", "0.10"), ("ppo_megatron_trainer", "0.8"),
              ("ppo_veomni_trainer", "0.10")]
UNKNOWN = "key the schema knows"


def changed(value: Any) -> Any:
    """Another value of the same kind, or None where there is none to try."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 2
    if isinstance(value, float):
        return value * 2 if value else 0.5
    if isinstance(value, str) or value is None:
        return "x_value"
    if isinstance(value, list):
        return ["x_value"]
    return None


def put(tree: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = tree
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value


def homeless(dialect: str, base: dict[str, Any], keys: dict[str, Any], release: str | None = None) -> list[str]:
    """The keys of ``keys`` (key -> default) refused as unknown when changed alone in ``base``."""
    out = []
    for key, default in keys.items():
        new = changed(default)
        if new is None:
            continue
        raw = copy.deepcopy(base)
        put(raw, key, new)
        try:
            with reading(release) if release is not None else contextlib.nullcontext():
                _, report = translate(raw, dialect)
        except Exception:  # noqa: BLE001 - a key that breaks the translation has no home either
            out.append(key + " (raises)")
            continue
        entry = report.entry(key)
        if entry is not None and entry.status == "refused" and UNKNOWN in entry.reason:
            out.append(key)
    return out


def dataclass_keys(cls: type, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """``{dotted field: default}`` of a config dataclass, nested dataclasses walked."""
    out: dict[str, Any] = {}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: the raw one
        hints = {}
    for f in dataclasses.fields(cls):
        kind = hints.get(f.name, f.type)
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        inner = args[0] if typing.get_origin(kind) is typing.Union and len(args) == 1 else kind
        if isinstance(inner, type) and dataclasses.is_dataclass(inner) and depth < 3:
            out.update(dataclass_keys(inner, f"{prefix}{f.name}.", depth + 1))
        elif f.default is not dataclasses.MISSING:
            out[prefix + f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            try:
                out[prefix + f.name] = f.default_factory()
            except Exception:  # noqa: BLE001
                out[prefix + f.name] = None
        else:
            out[prefix + f.name] = None
    return out


def load_class(checkout: Path, module: str, name: str) -> type:
    sys.path.insert(0, str(checkout))
    logging.disable(logging.CRITICAL)
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        mod = __import__(module, fromlist=[name])
    return getattr(mod, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roll", type=Path, help="a ROLL checkout (its RLVRConfig is imported)")
    parser.add_argument("--trinity", type=Path, help="a Trinity-RFT checkout (its Config is imported)")
    parser.add_argument("--list", action="store_true", help="name the keys without a home")
    parser.add_argument("--no-verl", action="store_true", help="skip verl's trees (the slow part)")
    args = parser.parse_args()
    rows = []
    for tree, release in [] if args.no_verl else VERL_TREES:
        resolved, _ = resolve(defaults_tree(tree, release))
        keys = {k: v for k, v in leaves(resolved).items() if not k.endswith(".strategy")}
        rows.append((f"verl {release} {tree}", len(keys), homeless("verl", resolved, keys, release)))
    if args.roll:
        cls = load_class(args.roll, "roll.pipeline.rlvr.rlvr_config", "RLVRConfig")
        base = {"pretrain": "m", "rollout_batch_size": 8, "actor_train": {"model_args": {"model_name_or_path": "m"}}, "actor_infer": {}}
        keys = dataclass_keys(cls)
        rows.append(("ROLL RLVRConfig", len(keys), homeless("roll", base, keys)))
    if args.trinity:
        cls = load_class(args.trinity, "trinity.common.config", "Config")
        base = {"mode": "both", "algorithm": {"algorithm_type": "grpo"}, "model": {"model_path": "m"}}
        keys = dataclass_keys(cls)
        rows.append(("Trinity-RFT Config", len(keys), homeless("trinity", base, keys)))
    print(f"{'surface':32} {'keys':>6} {'no home':>8}")
    for name, count, missing in rows:
        print(f"{name:32} {count:>6} {len(missing):>8}")
        if args.list:
            for key in missing:
                print(f"    {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
