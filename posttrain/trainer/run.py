"""The run driver: the stages of a config in order, each from the previous stage's final policy."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable

from posttrain.config import stage_configs
from posttrain.config.schema import Config
from posttrain.errors import ConfigError
from posttrain.trainer.stage import StageContext, StageResult, with_model_path

# algorithm.kind -> "module:function" running one stage (imported on use: SFT needs no rollout code).
RUNNERS = {
    "rl": "posttrain.trainer.rl:run_rl",
    "sft": "posttrain.trainer.sft:run_sft",
    "dpo": "posttrain.trainer.dpo:run_dpo",
}


def run_directory(cfg: Config) -> Path:
    """`trainer.default_local_dir`, or `<root_dir>/<project_name>/<experiment_name>`."""
    t = cfg.trainer
    if t.default_local_dir:
        return Path(t.default_local_dir).expanduser()
    return Path(t.root_dir).expanduser() / t.project_name / t.experiment_name


def _runner(kind: str) -> Callable[[StageContext], StageResult]:
    module, _, name = RUNNERS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def run(cfg: Config) -> list[StageResult]:
    """Run every stage; returns their results in order."""
    stages = stage_configs(cfg)
    base = run_directory(cfg)
    results: list[StageResult] = []
    model_path, offset = cfg.model.path, 0
    for stage in stages:
        stage_dir = base if len(stages) == 1 else base / stage.name
        if (stage_dir / "metrics.jsonl").exists():
            raise ConfigError(
                f"run directory {stage_dir} already holds a run (metrics.jsonl); resuming is not implemented "
                "yet (checkpoint/resume issue): set trainer.experiment_name or trainer.default_local_dir to a "
                "new directory, or delete that one"
            )
        ctx = StageContext(stage.name, with_model_path(stage.config, model_path), stage_dir, model_path, offset)
        result = _runner(stage.config.algorithm.kind)(ctx)
        results.append(result)
        model_path, offset = str(result.final_model), offset + result.steps
    return results
