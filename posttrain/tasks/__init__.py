"""Synthetic verifiable tasks: problem generators, rule-based scorers and the parquet writer.

Built-in tasks (one module each): `sort` (the CPU quickstart task), `arithmetic`, `countdown`,
`tool_calc` (multi-turn, with a calculator tool), `colour` (an image task for vision-language models).
`compute_score` grades a response for any row these tasks wrote, chosen by its `data_source`
column; every scorer returns ``{"score": reward, "acc": exact-match 0/1}``.
"""

from __future__ import annotations

from posttrain.tasks import arithmetic, colour, countdown, sort, tool_calc  # importing registers the tasks
from posttrain.tasks.answers import extract_answer
from posttrain.tasks.registry import (
    TASKS,
    Problem,
    TaskOption,
    TaskSpec,
    get_task,
    register_task,
    task_for_data_source,
)
from posttrain.tasks.writing import write_task_data

__all__ = [
    "arithmetic", "colour", "countdown", "sort", "tool_calc",  # the task modules, imported for their registration
    "TASKS", "Problem", "TaskOption", "TaskSpec", "compute_score", "extract_answer", "get_task",
    "register_task", "task_for_data_source", "write_task_data",
]


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None
) -> dict[str, float]:
    """Score a decoded response with the scorer of the task that wrote the row (verl's signature).

    >>> compute_score("posttrain/arithmetic", "19<|im_end|>", "19")
    {'score': 1.0, 'acc': 1.0}
    """
    return task_for_data_source(data_source).score(solution_str, ground_truth, extra_info)
