"""What every tracker implements and receives: the `Tracker` protocol, the run it logs, and the
validation generations it may show as a table."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# Columns of the validation generations table, in every tracker that shows one.
GENERATION_COLUMNS = ("step", "prompt", "response", "score")


@dataclass(frozen=True)
class Generation:
    """One validation sample: the prompt as text, the model's response and its score."""

    step: int  # global step of the validation (the step its metrics are logged at)
    prompt: str
    response: str
    score: float

    def row(self) -> list[Any]:
        return [self.step, self.prompt, self.response, self.score]


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker is told about the run it logs (built by `build_trackers`)."""

    run_dir: Path  # the stage's directory; local trackers write under it by default
    total_steps: int | None = None  # the stage's training steps (console ETA and progress bar)
    step_offset: int = 0  # global step of the stage's step 0: stages continue each other's count
    label: str | None = None  # the stage's name in a multi-stage run, None for a single stage
    project: str = "posttrain"  # trainer.project_name
    experiment: str = "run"  # trainer.experiment_name
    config: dict[str, Any] = field(default_factory=dict)  # the resolved config, as in config.yaml
    options: dict[str, Any] = field(default_factory=dict)  # trainer.tracker_kwargs, canonical names
    purge_step: int | None = None  # resuming: TensorBoard drops its events from this global step on

    @property
    def run_name(self) -> str:
        """The tracker run's name: the experiment, with the stage's name in a multi-stage run."""
        name = self.options.get("name") or self.experiment
        return name if self.label is None else f"{name}-{self.label}"


class Tracker(Protocol):
    """What the trainer needs from a metrics backend."""

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def log_generations(self, rows: list[Generation], step: int) -> None: ...

    def close(self) -> None: ...


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics (bools and non-numbers left out), as floats."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``: a nested config as the flat parameters some trackers want.

    >>> flatten({"actor": {"optim": {"lr": 0.1}}, "seed": 1})
    {'actor.optim.lr': 0.1, 'seed': 1}
    """
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
