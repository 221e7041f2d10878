"""Write a task's problems as parquet files in verl's RL layout, plus SFT warm-up data.

Files written to OUT_DIR:

- ``train.parquet`` / ``test.parquet`` (RL): columns ``data_source`` ("posttrain/<task>"), ``prompt``
  (chat messages: [optional system], user), ``ability``, ``reward_model`` = {style: "rule",
  ground_truth}, ``extra_info`` = {index, split, task, options (JSON of the generator options)}.
- ``sft_train.parquet`` (SFT warm-up): ``data_source``, ``prompt`` (the same chat messages),
  ``response`` (one correct answer, the assistant turn's text) and ``extra_info``. Why a separate file
  and not a `response` column in train.parquet: the warm-up draws its own problems (an independent
  random stream) so that SFT does not pre-teach the exact RL prompts, and the RL files stay pure verl.
- ``dpo_train.parquet`` / ``dpo_test.parquet`` (DPO): ``data_source``, ``prompt``, ``chosen`` (a correct
  answer), ``rejected`` (a plausible wrong one, see `wrong_response`) and ``extra_info``. The training
  pairs draw their own problems (like SFT); the test pairs are the RL test problems, so preference
  accuracy on them is measured on prompts no training file contains.

The test problems are distinct and never appear in train or SFT data, so test accuracy measures
generalisation. Everything is deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable

from posttrain.errors import ConfigError
from posttrain.tasks.registry import Problem, TaskSpec, get_task

WrongAnswer = Callable[[Problem, random.Random], str]


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
        if problem.key in seen:
            continue
        if distinct:
            seen.add(problem.key)
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
    rows = [
        {
            "data_source": spec.data_source,
            "prompt": _messages(p, system_prompt),
            "ability": spec.ability,
            "reward_model": {"style": "rule", "ground_truth": p.ground_truth},
            "extra_info": {"index": i, "split": split, "task": spec.name, "options": options_json},
        }
        for i, p in enumerate(problems)
    ]
    if any(p.images for p in problems):  # an image task: verl's images column of {bytes, path} structs
        for row, p in zip(rows, problems):
            row["images"] = [{"bytes": b, "path": None} for b in p.images]
    return rows


def sft_rows(spec: TaskSpec, problems: list[Problem], *, options: dict[str, Any],
             system_prompt: str | None = None) -> list[dict[str, Any]]:
    """Rows for SFT: the chat prompt and the correct response text (and, for a multi-turn task, the
    whole conversation under `messages`)."""
    options_json = json.dumps(options, sort_keys=True)
    rows = []
    for i, p in enumerate(problems):
        row = {
            "data_source": spec.data_source,
            "prompt": _messages(p, system_prompt),
            "response": p.response,
            "extra_info": {"index": i, "split": "sft", "task": spec.name, "options": options_json},
        }
        if p.turns:
            row["messages"] = _messages(p, system_prompt) + [dict(m) for m in p.turns]
        rows.append(row)
    return rows


def _wrong_sort(problem: Problem, rng: random.Random) -> str:
    """The same digits in an order that is not sorted (a near miss a model really makes)."""
    digits = list(problem.response)
    for _ in range(20):
        rng.shuffle(digits)
        if "".join(digits) != problem.response:
            return "".join(digits)
    return _wrong_digit(problem, rng)  # all digits equal: no unsorted permutation exists


def _wrong_arithmetic(problem: Problem, rng: random.Random) -> str:
    """Off by one, the commonest slip in carrying."""
    return str(int(problem.response) + rng.choice((-1, 1)))


def _wrong_digit(problem: Problem, rng: random.Random) -> str:
    """Fallback for any task: one digit of the response replaced by another (or a digit appended)."""
    positions = [i for i, ch in enumerate(problem.response) if ch.isdigit()]
    if not positions:
        return problem.response + str(rng.randrange(10))
    i = rng.choice(positions)
    new = rng.choice([d for d in "0123456789" if d != problem.response[i]])
    return problem.response[:i] + new + problem.response[i + 1:]


#: Per-task generators of plausible wrong answers; other tasks use `_wrong_digit`.
WRONG_ANSWERS: dict[str, WrongAnswer] = {"sort": _wrong_sort, "arithmetic": _wrong_arithmetic}


def wrong_response(spec: TaskSpec, problem: Problem, rng: random.Random) -> str:
    """A response the task's own scorer grades as wrong (acc 0), close to the right one.

    Why close: DPO learns from what separates chosen and rejected; a garbage rejected answer only
    teaches the format. Every candidate is checked with the scorer, so a perturbation that happens to
    be right (e.g. a countdown expression with another operator reaching the target) is redrawn.

    >>> from posttrain.tasks import get_task
    >>> p = Problem(prompt=":311=", ground_truth="113", response="113")
    >>> wrong_response(get_task("sort"), p, random.Random(0)) in {"131", "311"}
    True
    """
    make = WRONG_ANSWERS.get(spec.name, _wrong_digit)
    for attempt in range(100):
        candidate = (make if attempt < 50 else _wrong_digit)(problem, rng)
        if spec.score(candidate, problem.ground_truth).get("acc", 0.0) == 0.0:
            return candidate
    raise ValueError(f"task {spec.name!r}: found no wrong answer for {problem.prompt!r} in 100 tries")


def dpo_rows(spec: TaskSpec, problems: list[Problem], *, split: str, options: dict[str, Any],
             rng: random.Random, system_prompt: str | None = None) -> list[dict[str, Any]]:
    """Preference pairs: the chat prompt, a correct `chosen` and a wrong `rejected` response."""
    options_json = json.dumps(options, sort_keys=True)
    return [
        {
            "data_source": spec.data_source,
            "prompt": _messages(p, system_prompt),
            "chosen": p.response,
            "rejected": wrong_response(spec, p, rng),
            "extra_info": {"index": i, "split": split, "task": spec.name, "options": options_json},
        }
        for i, p in enumerate(problems)
    ]


_FILE_NAMES = {"sft": "sft_train.parquet", "dpo": "dpo_train.parquet", "dpo_test": "dpo_test.parquet"}


def write_task_data(
    task: str,
    out_dir: str | Path,
    *,
    train: int = 1000,
    test: int = 200,
    sft: int | None = None,
    dpo: int | None = None,
    seed: int = 0,
    system_prompt: str | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write train/test (RL), sft_train and dpo_train/dpo_test parquet files for `task`; return
    {"train"|"test"|"sft"|"dpo"|"dpo_test": path}.

    `sft` / `dpo` None write as many SFT rows / DPO pairs as `train` (none for an image task); 0 writes no such file. The DPO
    test pairs are the `test` problems, written whenever DPO pairs are.
    """
    spec = get_task(task)
    opts = spec.resolve_options(options)
    images = bool(spec.draw(random.Random(0), opts).images)  # SFT/DPO stages train text rows only
    sft = (0 if images else train) if sft is None else sft
    dpo = (0 if images else train) if dpo is None else dpo
    if images and (sft or dpo):
        raise ConfigError(f"task {task!r} is an image task: SFT and DPO stages train text rows only, so use --sft 0 --dpo 0")
    for name, value in (("train", train), ("test", test), ("sft", sft), ("dpo", dpo)):
        if value < 0:
            raise ConfigError(f"--{name} must be >= 0, got {value}")
    # One independent stream per split, so changing --train does not change the test set.
    splits = ("test", "train", "sft", "dpo", "dpo_wrong", "dpo_test_wrong")
    streams = {split: random.Random(f"posttrain:{task}:{seed}:{split}") for split in splits}
    test_problems = draw_problems(spec, test, rng=streams["test"], options=opts, distinct=True)
    held_out = {p.key for p in test_problems}
    train_problems = draw_problems(spec, train, rng=streams["train"], options=opts, exclude=held_out)
    sft_problems = draw_problems(spec, sft, rng=streams["sft"], options=opts, exclude=held_out)
    dpo_problems = draw_problems(spec, dpo, rng=streams["dpo"], options=opts, exclude=held_out)

    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    tables = {
        "train": rl_rows(spec, train_problems, split="train", options=opts, system_prompt=system_prompt),
        "test": rl_rows(spec, test_problems, split="test", options=opts, system_prompt=system_prompt),
    }
    if sft:
        tables["sft"] = sft_rows(spec, sft_problems, options=opts, system_prompt=system_prompt)
    if dpo:
        tables["dpo"] = dpo_rows(spec, dpo_problems, split="dpo", options=opts, rng=streams["dpo_wrong"],
                                 system_prompt=system_prompt)
        tables["dpo_test"] = dpo_rows(spec, test_problems, split="test", options=opts,
                                      rng=streams["dpo_test_wrong"], system_prompt=system_prompt)
    import pyarrow as pa  # imported here: `posttrain --help` lists tasks without loading pyarrow
    import pyarrow.parquet as pq

    paths = {}
    for split, rows in tables.items():
        path = out / _FILE_NAMES.get(split, f"{split}.parquet")
        if rows:
            pq.write_table(pa.Table.from_pylist(rows), path)
            paths[split] = path
    return paths
