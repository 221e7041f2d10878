"""Which framework wrote a config file: posttrain itself, verl, ROLL or Trinity-RFT.

The frameworks share section names (`algorithm`, `trainer`, `model`, `data` ...), so detection
looks at the first two levels of keys: each key path the file uses votes for every dialect that has
it, and a path that only one dialect has (verl's ``actor_rollout_ref``, ROLL's ``actor_train`` or
``rollout_batch_size``, Trinity's ``buffer.explorer_input`` or ``model.model_path``, posttrain's
``actor.ppo_epochs``) decides. Known top-level keys come from the schema's refs, so the vocabulary
grows with the schema. A file using only keys that several dialects share is read as
posttrain's (its validation then names any unknown key); a tie is refused, asking for ``--dialect``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects.index import build_index, native_paths
from posttrain.errors import ConfigError

DIALECTS = ("native", "verl", "roll", "trinity")
TITLES = {"native": "posttrain", "verl": "verl", "roll": "ROLL", "trinity": "Trinity-RFT"}

# Keys of the frameworks' own launchers, absent from the configuration guides but telling.
_EXTRA = {
    "roll": {"hydra", "defaults", "hydra.run", "hydra.output_subdir", "sft_train", "sft_train.*"},  # SFT: actor_train's keys (roll_sft)
    "verl": {"ray_init", "hydra", "defaults"},
    "trinity": {"monitor", "continue_from_checkpoint", "ray_namespace"},
}


def _vocabulary(dialect: str) -> set[str]:
    if dialect == "native":
        out = set()
        for path in native_paths():
            parts = path.split(".")
            out.add(parts[0])
            if len(parts) > 1:
                out.add(f"{parts[0]}.{parts[1]}")
        return out
    return build_index(dialect).top_paths() | _EXTRA.get(dialect, set())


def _file_paths(raw: Mapping[str, Any]) -> list[str]:
    out = []
    for key, value in raw.items():
        out.append(str(key))
        if isinstance(value, Mapping):
            out += [f"{key}.{sub}" for sub in value]
    return out


def _matches(path: str, vocabulary: set[str]) -> bool:
    if path in vocabulary:
        return True
    head, _, _ = path.partition(".")
    return "." in path and f"{head}.*" in vocabulary


def scores(raw: Mapping[str, Any]) -> dict[str, int]:
    """Per dialect, how many of the file's key paths only that dialect knows."""
    vocab = {d: _vocabulary(d) for d in DIALECTS}
    out = dict.fromkeys(DIALECTS, 0)
    for path in _file_paths(raw):
        known = [d for d in DIALECTS if _matches(path, vocab[d])]
        if len(known) == 1:
            out[known[0]] += 1
    return out


def detect(raw: Mapping[str, Any], source: str = "config") -> str:
    """``"native"``, ``"verl"``, ``"roll"`` or ``"trinity"``; raises `ConfigError` when unsure.

    >>> detect({"actor_train": {"model_args": {}}, "rollout_batch_size": 64})
    'roll'
    >>> detect({"data": {"train_files": "x.parquet"}, "actor": {"ppo_epochs": 1}})
    'native'
    """
    if not isinstance(raw, Mapping) or not raw:
        return "native"  # an empty file is the defaults; validation names anything else
    found = scores(raw)
    best = max(found.values())
    leaders = [d for d in DIALECTS if found[d] == best]
    if best > 0 and len(leaders) == 1:
        return leaders[0]
    if best == 0:
        return "native"  # only shared keys (or typos): native validation names anything wrong
    tally = ", ".join(f"{TITLES[d]} {found[d]}" for d in DIALECTS)
    raise ConfigError(
        f"{source}: cannot tell which framework wrote this file (keys only one of them uses: {tally}); "
        f"name it: posttrain config convert {source} --dialect verl|roll|trinity"
    )
