"""Write a task's problems as parquet files in verl's RL layout, plus SFT warm-up data.

Files written to OUT_DIR:

- ``train.parquet`` / ``test.parquet`` (RL): columns ``data_source`` ("posttrain/<task>"), ``prompt``
  (chat messages: [optional system], user), ``ability``, ``reward_model`` = {style: "rule",
  ground_truth}, ``extra_info`` = {index, split, task, options (JSON of the generator options)}.
- ``sft_train.parquet`` (SFT warm-up): ``data_source``, ``prompt`` (the same chat messages),
  ``response`` (one correct answer, the assistant turn's text) and ``extra_info``. Why a separate file
  and not a `response` column in train.parquet: the warm-up draws its own problems (an independent
  random stream) so that SFT does not pre-teach the exact RL prompts, and the RL files stay pure verl.

The test problems are distinct and never appear in train or SFT data, so test accuracy measures
generalisation. Everything is deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from posttrain.errors import ConfigError
from posttrain.tasks.registry import Problem, TaskSpec, get_task


def _messages(problem: Problem, system_prompt: str | None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": problem.prompt}]


def draw_problems(
    spec: TaskSpec,
    n: int,
    *,
    rng: random.Random,
    options: dict[str, Any],
    exclude: set[str] = frozenset(),  # type: ignore[assignment]
    distinct: bool = False,
) -> list[Problem]:
    """`n` problems whose prompts are not in `exclude` (and pairwise distinct if `distinct`)."""
    problems: list[Problem] = []
    seen = set(exclude)
    budget = 50 * n + 1000  # rejection sampling; exhausted only when the problem space is tiny
    while len(problems) < n and budget > 0:
        budget -= 1
        problem = spec.draw(rng, options)
        if problem.prompt in seen:
            continue
        if distinct:
            seen.add(problem.prompt)
        problems.append(problem)
    if len(problems) < n:
        raise ConfigError(
            f"task {spec.name!r} with options {options} has too few distinct problems for {n} rows "
            f"kept apart from the test set; lower --test/--train or enlarge the problems"
        )
    return problems


def rl_rows(spec: TaskSpec, problems: list[Problem], *, split: str, options: dict[str, Any],
            system_prompt: str | None = None) -> list[dict[str, Any]]:
    """Rows in verl's RL layout (see the module docstring)."""
    options_json = json.dumps(options, sort_keys=True)
    return [
        {
            "data_source": spec.data_source,
            "prompt": _messages(p, system_prompt),
            "ability": spec.ability,
            "reward_model": {"style": "rule", "ground_truth": p.ground_truth},
            "extra_info": {"index": i, "split": split, "task": spec.name, "options": options_json},
        }
        for i, p in enumerate(problems)
    ]


def sft_rows(spec: TaskSpec, problems: list[Problem], *, options: dict[str, Any],
             system_prompt: str | None = None) -> list[dict[str, Any]]:
    """Rows for SFT: the chat prompt and the correct response text."""
    options_json = json.dumps(options, sort_keys=True)
    return [
        {
            "data_source": spec.data_source,
            "prompt": _messages(p, system_prompt),
            "response": p.response,
            "extra_info": {"index": i, "split": "sft", "task": spec.name, "options": options_json},
        }
        for i, p in enumerate(problems)
    ]


def write_task_data(
    task: str,
    out_dir: str | Path,
    *,
    train: int = 1000,
    test: int = 200,
    sft: int | None = None,
    seed: int = 0,
    system_prompt: str | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write train/test (RL) and sft_train parquet files for `task`; return {"train"|"test"|"sft": path}.

    `sft` None writes as many SFT rows as `train`; 0 writes no SFT file.
    """
    spec = get_task(task)
    opts = spec.resolve_options(options)
    sft = train if sft is None else sft
    for name, value in (("train", train), ("test", test), ("sft", sft)):
        if value < 0:
            raise ConfigError(f"--{name} must be >= 0, got {value}")
    # One independent stream per split, so changing --train does not change the test set.
    streams = {split: random.Random(f"posttrain:{task}:{seed}:{split}") for split in ("test", "train", "sft")}
    test_problems = draw_problems(spec, test, rng=streams["test"], options=opts, distinct=True)
    held_out = {p.prompt for p in test_problems}
    train_problems = draw_problems(spec, train, rng=streams["train"], options=opts, exclude=held_out)
    sft_problems = draw_problems(spec, sft, rng=streams["sft"], options=opts, exclude=held_out)

    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    tables = {
        "train": rl_rows(spec, train_problems, split="train", options=opts, system_prompt=system_prompt),
        "test": rl_rows(spec, test_problems, split="test", options=opts, system_prompt=system_prompt),
    }
    if sft:
        tables["sft"] = sft_rows(spec, sft_problems, options=opts, system_prompt=system_prompt)
    import pyarrow as pa  # imported here: `posttrain --help` lists tasks without loading pyarrow
    import pyarrow.parquet as pq

    paths = {}
    for split, rows in tables.items():
        path = out / ("sft_train.parquet" if split == "sft" else f"{split}.parquet")
        if rows:
            pq.write_table(pa.Table.from_pylist(rows), path)
            paths[split] = path
    return paths
