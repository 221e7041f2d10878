"""Metric trackers: one small adapter per backend behind the `Tracker` protocol.

The trainer builds a `Trackers` fan-out from `trainer.logger` (e.g. ``[console, jsonl, tensorboard]``)
and calls only ``log(metrics, step)``, ``log_generations(rows, step)`` and ``close()``. console, jsonl
and tensorboard are always there; wandb, mlflow and swanlab are optional extras
(``pip install 'posttrain[wandb]'``), checked by `check_trackers` before a run starts, each importing
its client only when named. Options of the trackers: `trainer.tracker_kwargs` (posttrain.tracking.options).
"""

from posttrain.tracking.base import GENERATION_COLUMNS, Generation, TrackedRun, Tracker
from posttrain.tracking.options import check_trackers
from posttrain.tracking.progress import phase
from posttrain.tracking.trackers import (
    TRACKERS,
    ConsoleTracker,
    JsonlTracker,
    TensorBoardTracker,
    Trackers,
    build_trackers,
    format_console_line,
)

__all__ = [
    "GENERATION_COLUMNS",
    "TRACKERS",
    "ConsoleTracker",
    "Generation",
    "JsonlTracker",
    "TensorBoardTracker",
    "TrackedRun",
    "Tracker",
    "Trackers",
    "build_trackers",
    "check_trackers",
    "format_console_line",
    "phase",
]
