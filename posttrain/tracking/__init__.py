"""Metric trackers: one small adapter per backend behind the `Tracker` protocol.

The trainer builds a `Trackers` fan-out from `trainer.logger` (e.g. ``[console, jsonl, tensorboard]``)
and calls only ``log(metrics, step)`` and ``close()``. Adding wandb/mlflow/swanlab is one class here
plus one registry line.
"""

from posttrain.tracking.trackers import (
    TRACKERS,
    ConsoleTracker,
    JsonlTracker,
    TensorBoardTracker,
    Tracker,
    Trackers,
    build_trackers,
    format_console_line,
)

__all__ = [
    "TRACKERS",
    "ConsoleTracker",
    "JsonlTracker",
    "TensorBoardTracker",
    "Tracker",
    "Trackers",
    "build_trackers",
    "format_console_line",
]
