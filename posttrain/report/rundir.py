"""Read a finished (or running) run directory back: its stages, metrics and validation samples.

A single-stage run keeps `config.yaml`, `metrics.jsonl` and `val_generations.jsonl` in the run
directory itself; a multi-stage run keeps them in one sub-directory per stage (`<run dir>/<stage>/`),
see posttrain.trainer.run. Stage order is the order of their first logged step (steps are global
across stages), ties broken by when the stage's config.yaml was written: an evaluation-only stage
logs at the same step as the stage after it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from posttrain.errors import UserError
from posttrain.files import SafeLoader


class RunDirError(UserError):
    """RUN_DIR is not a posttrain run directory (or holds no metrics yet)."""


@dataclass(frozen=True)
class StageRun:
    """One stage of a run as read from disk."""

    name: str
    dir: Path
    metrics: list[dict[str, Any]]  # metrics.jsonl rows, each {"step": n, key: value}
    generations: list[dict[str, Any]] = field(default_factory=list)  # val_generations.jsonl rows
    config: dict[str, Any] = field(default_factory=dict)  # the stage's resolved config.yaml

    def setting(self, dotted: str, default: Any = None) -> Any:
        """A value of the stage's resolved config, e.g. ``setting("algorithm.kind", "rl")``."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def kind(self) -> str:
        return str(self.setting("algorithm.kind", "rl"))

    @property
    def evaluation_only(self) -> bool:
        """An RL stage with trainer.val_only: it validates its starting policy and trains nothing."""
        return bool(self.setting("trainer.val_only", False))

    @property
    def first_step(self) -> int:
        return min((int(r["step"]) for r in self.metrics), default=0)

    @property
    def validations(self) -> list[dict[str, Any]]:
        """The rows that carry validation metrics (`val/...`), in step order."""
        return [r for r in self.metrics if any(k.startswith("val/") for k in r)]

    @property
    def final_model(self) -> Path:
        return self.dir / "final_model"


def load_run(run_dir: str | Path) -> list[StageRun]:
    """The stages of `run_dir`, in run order; `RunDirError` when it is not a run directory."""
    root = Path(run_dir).expanduser()
    if not root.is_dir():
        raise RunDirError(f"{root}: no such directory; give the run directory printed as 'run directory:' "
                          f"by posttrain train (trainer.default_local_dir)")
    dirs = [root] if (root / "metrics.jsonl").is_file() else sorted(
        p for p in root.iterdir() if p.is_dir() and (p / "metrics.jsonl").is_file())
    if not dirs:
        raise RunDirError(
            f"{root}: no metrics.jsonl in it or in its stage sub-directories; is it the run directory printed "
            f"by posttrain train, with 'jsonl' in trainer.logger?"
        )
    stages = [_load_stage("main" if d == root else d.name, d) for d in dirs]
    return sorted(stages, key=lambda s: (s.first_step, _written_at(s.dir / "config.yaml")))


def _load_stage(name: str, directory: Path) -> StageRun:
    config: dict[str, Any] = {}
    if (directory / "config.yaml").is_file():
        loaded = yaml.load((directory / "config.yaml").read_text(encoding="utf-8"), Loader=SafeLoader)
        config = loaded if isinstance(loaded, dict) else {}
    return StageRun(name, directory, _read_jsonl(directory / "metrics.jsonl"),
                    _read_jsonl(directory / "val_generations.jsonl"), config)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (a run killed mid-write) is skipped, others must parse."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise RunDirError(f"{path}: line {i + 1} is not JSON; was the file edited by hand?") from None
        if isinstance(row, dict) and "step" in row:
            rows.append({k: _number(v) for k, v in row.items()})
    return rows


def _number(value: Any) -> Any:
    return math.nan if value is None else value  # trackers write NaN/inf as null


def _written_at(path: Path) -> float:
    return path.stat().st_mtime if path.is_file() else 0.0
