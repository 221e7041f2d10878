"""explorer.task_rewards_file: every explored task's rewards appended to a JSON-lines file.

BOTS (Trinity-RFT's examples/bots) measures a reference model's pass rate on every training task
before training: an explore-only run whose workflow appends, per task, one line
``{"model_version", "rewards", "question", "truth"}`` (the rewards of the task's rollout.n
responses, the prompt cell as the data holds it, the task's ground truth) to a file, which its
ref_eval_collect.py joins into the dataset as a column of mean rewards. posttrain writes the same
lines from its explorer, whatever the mode, after each batch (each dynamic-sampling round) is
scored and before any filter drops a group, so that script reads them unchanged.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections import defaultdict
from typing import Any

import torch

from posttrain.records import PromptBatch, RolloutBatch


def task_rows(prompts: PromptBatch, questions: list[Any], batch: RolloutBatch, scores: torch.Tensor, version: int) -> list[dict[str, Any]]:
    """One line per prompt of `prompts`: its responses' final scores (B,) in row order, found by the
    prompt's uid (each response's group_index), with its question (the prompt cell) and truth.

    >>> import types
    >>> p = types.SimpleNamespace(uid=["s1-0", "s1-1"], ground_truth=["2", "4"])
    >>> b = types.SimpleNamespace(group_index=["s1-0", "s1-1", "s1-0", "s1-1"])
    >>> [r["rewards"] for r in task_rows(p, ["1+1?", "2+2?"], b, torch.tensor([1.0, 0.0, 0.5, 1.0]), 0)]
    [[1.0, 0.5], [0.0, 1.0]]
    """
    by_task: dict[str, list[float]] = defaultdict(list)
    for uid, score in zip(batch.group_index, scores.tolist()):
        by_task[uid].append(score)
    return [{"model_version": version, "rewards": by_task.get(uid, []), "question": question, "truth": truth}
            for uid, question, truth in zip(prompts.uid, questions, prompts.ground_truth)]


def append_rows(path: str, rows: list[dict[str, Any]]) -> None:
    """Append `rows` as JSON lines under an exclusive lock (several processes may share the file, as
    Trinity-RFT's workflow runners do); the folder is made when missing."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    text = "".join(json.dumps(row, default=_plain) + "\n" for row in rows)
    with open(path, "a", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(text)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _plain(value: Any) -> Any:
    """Array cells (a parquet list read as numpy) as lists; anything else JSON lacks as its text."""
    return value.tolist() if hasattr(value, "tolist") else str(value)
