"""verl's offline evaluation config (its ``evaluation.yaml``, read by ``verl.trainer.main_eval``) as a posttrain config.

``python3 -m verl.trainer.main_eval data.path=gen.parquet custom_reward_function.path=my_reward.py``
becomes ``posttrain eval --dialect verl data.path=gen.parquet custom_reward_function.path=my_reward.py``;
a user's copy of evaluation.yaml is read by ``posttrain eval FILE``. The base is verl's own
evaluation.yaml tree (`DEFAULTS`), the file goes over it, then Hydra overrides (a key the tree does
not have needs ``+``, as in Hydra). Every leaf is then translated by `KEYS`, dropped by `NO_EFFECT`
(with the reason) or refused: the keys are not those of verl's trainer config (``data.response_key``
is the responses column here, the SFT response there), so this table is separate from the trainer
dialect's; `posttrain.config.dialects.translate` uses it for a verl file that `is_evaluation_config`
(``config convert`` and ``config show``). Keys of older evaluation.yaml versions (top-level
``ray_init``, ``data.last_user_msg_template``) are read too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posttrain.config.dialects import hydra
from posttrain.config.dialects.report import Entry, Report
from posttrain.config.dialects.source import leaves, read_yaml, resolve
from posttrain.config.validate import deep_merge
from posttrain.errors import ConfigError

WHAT = "verl's evaluation config"

# verl's evaluation.yaml: every key main_eval knows, at verl's defaults.
DEFAULTS: dict[str, Any] = {
    "data": {
        "path": "/tmp/math_Qwen2-7B-Instruct.parquet",
        "prompt_key": "prompt",
        "response_key": "responses",
        "data_source_key": "data_source",
        "reward_model_key": "reward_model",
    },
    "custom_reward_function": {"path": None, "name": "compute_score"},
    "ray_kwargs": {"ray_init": {"num_cpus": None}, "timeline_json_file": None},
}

# verl key -> posttrain key (the same meaning).
KEYS: dict[str, str] = {
    "data.path": "eval.path",
    "data.response_key": "eval.response_key",
    "data.data_source_key": "eval.data_source_key",
    "data.reward_model_key": "eval.reward_model_key",
    "custom_reward_function.path": "reward.custom_reward_function.path",
    "custom_reward_function.name": "reward.custom_reward_function.name",
    "custom_reward_function.reward_kwargs": "reward.custom_reward_function.reward_kwargs",
}

_NO_PROMPTS = "main_eval never reads the prompts: a response is scored from its data source, its text and the ground truth"
_NO_RAY = "posttrain eval starts no Ray cluster: it scores in this process or in a pool of reward.num_workers processes"
# verl key -> why any value of it changes nothing (main_eval does not read it, or reads it for a copy).
NO_EFFECT: dict[str, str] = {
    "data.prompt_key": _NO_PROMPTS,
    "data.last_user_msg_template": _NO_PROMPTS,
    "data.use_shm": "verl copies the file to /dev/shm before reading it; posttrain reads the same rows where the file is",
    "ray_kwargs.timeline_json_file": "main_eval writes no Ray timeline (verl's trainer does)",
    "ray_init.allow_external_dashboard": _NO_RAY + ", so there is no dashboard to expose",
}
_DATA_KEYS = {*DEFAULTS["data"], "last_user_msg_template", "use_shm"}
_EVAL_ONLY = {"path", "data_source_key", "reward_model_key"}  # data keys verl's trainer config does not have
# How many CPUs verl's Ray may use: main_eval scores one row per Ray task, so this many rows at once.
NUM_CPUS = ("ray_kwargs.ray_init.num_cpus", "ray_init.num_cpus")


def fits_evaluation(raw: dict[str, Any]) -> bool:
    """Whether a verl file has only evaluation.yaml's sections and data keys (`posttrain eval` reads
    such a file as an evaluation config).

    >>> fits_evaluation({"custom_reward_function": {"path": "r.py"}}), fits_evaluation({"data": {"train_files": "t.parquet"}})
    (True, False)
    """
    data = raw.get("data") or {}
    return set(raw) <= {*DEFAULTS, "ray_init", "defaults", "hydra"} and isinstance(data, dict) and set(data) <= _DATA_KEYS


def is_evaluation_config(raw: dict[str, Any]) -> bool:
    """Whether a verl file is an evaluation config wherever it is read (`posttrain config convert`
    too): it fits evaluation.yaml and names a data key only evaluation.yaml has.

    >>> is_evaluation_config({"data": {"path": "g.parquet"}}), is_evaluation_config({"custom_reward_function": {}})
    (True, False)
    """
    return fits_evaluation(raw) and bool(set(raw.get("data") or {}) & _EVAL_ONLY)


def eval_native(path: str | Path | None, overrides: list[str]) -> dict[str, Any]:
    """The posttrain dict of a verl evaluation config (verl's defaults, the file, the overrides);
    one `ConfigError` naming every key posttrain refuses, where it came from and why."""
    tree = DEFAULTS
    if path is not None:
        mine = {k: v for k, v in read_yaml(Path(path)).items() if k not in ("defaults", "hydra")}
        tree = deep_merge(tree, mine)
    tree, set_by = hydra.apply(tree, overrides, strict=True, what=WHAT, launcher="verl")
    resolved, unresolved = resolve(tree)
    native, report = translate(resolved)
    problems = [e.line() for e in report.refused]
    problems += [f"{key}: cannot resolve interpolation: {why}" for key, why in unresolved.items()]
    if problems:
        raise ConfigError([_where(p, set_by, path) for p in problems])
    return native


def translate(tree: dict[str, Any]) -> tuple[dict[str, Any], Report]:
    """``(posttrain dict, what happened to every key)`` of a resolved evaluation tree.

    >>> native, report = translate({"data": {"path": "g.parquet", "prompt_key": "prompt"}, "ray_kwargs": {"ray_init": {"num_cpus": 4}}})
    >>> native, report.counts()
    ({'eval': {'path': 'g.parquet'}, 'reward': {'reward_manager': 'parallel', 'num_workers': 4}}, '2 keys translated, 1 dropped, 0 refused')
    """
    native: dict[str, Any] = {}
    report = Report("verl")
    for key, value in _eval_leaves(tree).items():
        if key in ("defaults", "hydra") or key.startswith("hydra."):
            continue  # Hydra's own: how verl's launcher composes the file
        if key in KEYS:
            _put(native, KEYS[key], value)
            report.add(Entry(key, "translated", KEYS[key], value))
        elif key in NUM_CPUS and value is None:  # verl's Ray takes every CPU; posttrain keeps reward.reward_manager
            report.add(Entry(key, "dropped", reason="null lets verl's Ray take every CPU; posttrain scores as reward.reward_manager says (naive: in this process)"))
        elif key in NUM_CPUS:
            _put(native, "reward.reward_manager", "parallel")
            _put(native, "reward.num_workers", value)
            report.add(Entry(key, "translated", "reward.num_workers", value, "a pool of that many scoring processes (reward.reward_manager: parallel)"))
        elif key in NO_EFFECT:
            report.add(Entry(key, "dropped", reason=NO_EFFECT[key]))
        elif key.startswith(("ray_kwargs.", "ray_init.")):
            report.add(Entry(key, "refused", value=value, reason=f"{_NO_RAY}; remove the key"))
        else:
            report.add(Entry(key, "refused", value=value, reason=f"not a key of {WHAT} (evaluation.yaml: {', '.join(sorted(_eval_leaves(DEFAULTS)))})"))
    return native, report


def _eval_leaves(tree: dict[str, Any]) -> dict[str, Any]:
    # reward_kwargs is one value (the function's keyword arguments), not keys to translate
    return leaves(tree, whole=frozenset({"custom_reward_function.reward_kwargs"}))


def _put(out: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        out = out.setdefault(part, {})
    out[last] = value


def _where(problem: str, set_by: dict[str, str], path: str | Path | None) -> str:
    text = hydra.origin(problem.split(":", 1)[0], set_by)
    if text is not None:
        return f"command line override {text!r}: {problem}"
    return f"{path}: {problem}" if path is not None else f"{WHAT}: {problem}"


__all__ = ["DEFAULTS", "KEYS", "NO_EFFECT", "eval_native", "fits_evaluation", "is_evaluation_config", "translate"]
