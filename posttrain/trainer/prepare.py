"""Run the config's `prepare` section: build the tiny model and the task data when they are missing.

What `posttrain make-model tiny` and `posttrain make-data` do, driven by the config, so that
``posttrain train examples/quickstart.yaml`` works from a fresh clone with no other command.

Rules (see posttrain.config.sections.prepare):
- a missing directory is built in a hidden sibling directory and renamed into place when complete,
  so an interrupted build is never mistaken for a finished one;
- a built directory holds `prepare.json`, the settings it was built from; a later run with other
  settings is refused with the difference and the fix, instead of silently training on other data;
- an existing directory without `prepare.json` (made by hand) is reused as it is, and said so.
Every setting is checked before anything is built.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from posttrain.config.sections.prepare import PrepareConfig, PrepareDataConfig, PrepareModelConfig
from posttrain.errors import ConfigError

MARKER = "prepare.json"


def refuse_stage_prepare(stages: list[dict[str, Any]]) -> None:
    """`prepare` runs once, before the first stage: a stage that sets it would be silently ignored."""
    for i, stage in enumerate(stages):
        if "prepare" in stage:
            raise ConfigError(f"stages[{i}].prepare: prepare runs once before all stages; move it to the top level")


@dataclass(frozen=True)
class PrepareStep:
    """One directory `prepare` builds or reuses; `action` is "build", "reuse" or "reuse as is"."""

    key: str  # prepare.model or prepare.data
    out: Path
    settings: dict[str, Any]
    action: str


def prepare_steps(cfg: PrepareConfig) -> list[PrepareStep]:
    """Every check of the `prepare` section (option values, and directories built earlier with other
    settings), and what it would do; nothing is built. `posttrain config plan` calls this too."""
    data_settings = _data_settings(cfg.data) if cfg.data.dir else None  # checks options first
    model_settings = _model_settings(cfg.model) if cfg.model.path else None
    steps = []
    if model_settings is not None:
        out = Path(cfg.model.path).expanduser()
        steps.append(PrepareStep("prepare.model", out, model_settings, _action("prepare.model", out, model_settings, "config.json")))
    if data_settings is not None:
        out = Path(cfg.data.dir).expanduser()
        steps.append(PrepareStep("prepare.data", out, data_settings, _action("prepare.data", out, data_settings, "train.parquet")))
    return steps


def pending_builds(cfg: PrepareConfig) -> list[Path]:
    """The directories `prepare` would build now (checking the section as it does)."""
    return [step.out for step in prepare_steps(cfg) if step.action == "build"]


def prepare(cfg: PrepareConfig, say: Callable[[str], None] = print) -> None:
    """Build or reuse the model and data directories of `cfg`, saying which for each."""
    for step in prepare_steps(cfg):
        if step.action == "reuse":
            say(f"prepare: reusing {step.out} (built earlier with the same settings)")
        elif step.action == "reuse as is":
            say(f"prepare: reusing {step.out} as it is (not built by prepare, so its settings are not checked)")
        else:
            _build(step.out, step.settings, _build_model if step.key == "prepare.model" else _build_data, say)


def _model_settings(cfg: PrepareModelConfig) -> dict[str, Any]:
    from posttrain.models.tiny import check_shape  # the same checks as `make-model`, before any work

    t = cfg.tiny
    try:
        check_shape(t.layers, t.hidden, t.heads, t.kv_heads or t.heads, t.intermediate or 3 * t.hidden, t.max_position)
    except ConfigError as err:
        raise ConfigError([f"prepare.model.tiny: {p} (set the key of that name)" for p in err.problems]) from None
    return {"kind": "tiny", **dataclasses.asdict(t)}


def _data_settings(cfg: PrepareDataConfig) -> dict[str, Any]:
    from posttrain.tasks import get_task

    try:
        spec = get_task(cfg.task)
    except ConfigError as err:
        raise ConfigError(f"prepare.data.task: {err.problems[0]}") from None
    try:
        options = spec.resolve_options(cfg.options)
        # Range checks live in the generator: draw one problem now, so a bad option is refused
        # before anything (the model included) is built.
        spec.generate(random.Random(cfg.seed), **options)
    except ConfigError as err:
        # The generators name options as make-data flags ("arithmetic --digits ..."): name the key.
        problem = re.sub(rf"^{re.escape(cfg.task)} --([\w-]+)", lambda m: m[1].replace("-", "_"), err.problems[0])
        raise ConfigError(f"prepare.data.options: {problem}") from None
    settings = {"task": cfg.task, "options": options, "train": cfg.train, "test": cfg.test,
                "sft": cfg.train if cfg.sft is None else cfg.sft, "dpo": cfg.train if cfg.dpo is None else cfg.dpo,
                "seed": cfg.seed}
    return json.loads(json.dumps(settings))  # as it reads back from prepare.json (tuples become lists)


def _build_model(out: Path, settings: dict[str, Any]) -> str:
    from posttrain.models.tiny import make_tiny_model

    t = {k: v for k, v in settings.items() if k != "kind"}
    make_tiny_model(out, layers=t["layers"], hidden=t["hidden"], heads=t["heads"], kv_heads=t["kv_heads"],
                    intermediate=t["intermediate"], vocab_size=t["vocab"], max_position=t["max_position"],
                    tie_embeddings=t["tie_embeddings"], seed=t["seed"])
    return f"a tiny Qwen2 model ({t['layers']} layers, hidden {t['hidden']})"


def _build_data(out: Path, settings: dict[str, Any]) -> str:
    from posttrain.tasks import write_task_data

    s = settings
    write_task_data(s["task"], out, train=s["train"], test=s["test"], sft=s["sft"], dpo=s["dpo"], seed=s["seed"],
                    options=s["options"])
    return f"the {s['task']} task ({s['train']} train, {s['test']} test, {s['sft']} SFT rows, {s['dpo']} DPO pairs)"


def _action(key: str, out: Path, settings: dict[str, Any], expected_file: str) -> str:
    """build, reuse (built by prepare with the same settings) or reuse as is (made by hand)."""
    marker = out / MARKER
    if not out.exists():
        return "build"
    if marker.is_file():
        built = json.loads(marker.read_text(encoding="utf-8"))
        if built != settings:
            raise ConfigError(
                f"{key}: {out} was built with other settings ({_difference(built, settings)}); delete {out} "
                f"to rebuild it, or set {key}.{'path' if key.endswith('model') else 'dir'} to another directory"
            )
        return "reuse"
    if not (out / expected_file).is_file():
        raise ConfigError(f"{key}: {out} exists but has no {expected_file}; delete it or choose another directory")
    return "reuse as is"


def _build(out: Path, settings: dict[str, Any], build: Callable[[Path, dict[str, Any]], str],
           say: Callable[[str], None]) -> None:
    """Build in a hidden sibling directory, then rename it into place once complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        what = build(partial, settings)
        (partial / MARKER).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(partial, out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    say(f"prepare: built {what} in {out}")


def _difference(built: dict[str, Any], wanted: dict[str, Any]) -> str:
    """``hidden: 64 there, 128 asked`` for every key whose value differs.

    >>> _difference({"a": 1, "b": 2}, {"a": 1, "b": 3})
    'b: 2 there, 3 asked'
    """
    keys = sorted(set(built) | set(wanted))
    return "; ".join(f"{k}: {built.get(k)!r} there, {wanted.get(k)!r} asked" for k in keys if built.get(k) != wanted.get(k))
