"""Offline evaluation: score a file of already generated responses per data source (verl's main_eval).

    result = evaluate_file(cfg)        # cfg.eval: the file and its columns; cfg.reward: the scorer
    print(format_table(result))        # test_score/<data source>: the mean score of its rows
    write_table(result, "scores.json") # or .csv

Each row holds one prompt's responses (a list, or one string), its data source and its reference
(a dict whose ``ground_truth`` the reward function receives). Every response is scored with the
configured reward function through the training run's own reward managers (timeouts, on_error,
worker processes: posttrain.trainer.rewarding); as in verl's main_eval, a row's score is the mean
over its responses and a data source's ``test_score`` the mean over its rows, so a prompt counts
once however many responses it has. The scores are the reward function's own (reward.function_weight
and the overlong penalty shape training rewards, not the evaluation).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain.config.schema import Config
from posttrain.config.sections.reward import JUDGE
from posttrain.data.files import RowTable, load_files
from posttrain.errors import ConfigError, DataError, RewardFunctionError, UserError
from posttrain.files import atomic_write_text
from posttrain.rewards import RewardInput, build_reward_manager
from posttrain.rewards.auxiliary import start_auxiliary
from posttrain.rewards.scorers import BUILTIN_SCORERS
from posttrain.trainer.rewarding import build_router, manager_options, reward_function

FORMATS = (".parquet", ".jsonl")
OUTPUTS = (".json", ".csv")


@dataclass(frozen=True)
class SourceScore:
    """One data source's line of the table: its rows, their responses, and the mean row score."""

    data_source: str
    rows: int
    responses: int
    test_score: float


@dataclass(frozen=True)
class EvalResult:
    """The table of one evaluated file, with the count of responses whose scoring failed
    (scored reward.failure_reward under reward.on_error fixed)."""

    path: str
    sources: list[SourceScore]
    failures: int = 0

    def metrics(self) -> dict[str, float]:
        """verl's names: ``test_score/<data source>`` -> mean score."""
        return {f"test_score/{s.data_source}": s.test_score for s in self.sources}


def evaluate_file(cfg: Config) -> EvalResult:
    """Read cfg.eval.path, score every response with cfg.reward's function, return the table."""
    path = _checked_path(cfg)
    _check_reward(cfg)
    table = load_files(path, setting="eval.path")
    samples, row_of = read_samples(table, cfg)
    sources = [str(table.get(i, cfg.eval.data_source_key)) for i in range(len(table))]
    first: dict[str, str] = {}  # where each data source first occurs, to name it in an error before anything is scored
    for i, source in enumerate(sources):
        first.setdefault(source, table.locate(i, cfg.eval.data_source_key))
    f = cfg.reward.custom_reward_function
    if f.path is None and (f.name == "tasks" or f.name not in BUILTIN_SCORERS) and not cfg.reward.workers:  # the task scorers, by data source
        _check_built_in(first)
    out = _score(cfg, samples, path, first)
    return EvalResult(path, summarise(sources, out.scores, row_of), out.num_failures)


def read_samples(table: RowTable, cfg: Config) -> tuple[list[RewardInput], list[int]]:
    """One `RewardInput` per response, and the row each came from; a DataError names the file, row,
    column and the columns a row has."""
    e = cfg.eval
    samples, row_of = [], []
    for i in range(len(table)):
        source = str(table.get(i, e.data_source_key, setting="eval.data_source_key"))
        reference = table.get(i, e.reward_model_key, setting="eval.reward_model_key")
        if not isinstance(reference, dict) or "ground_truth" not in reference:
            raise DataError(f"{table.locate(i, e.reward_model_key)} is {_shown(reference)}, not an object with a 'ground_truth' "
                            "(verl's reward_model column: {\"ground_truth\": ...}); set eval.reward_model_key to the column holding it")
        extra = table.get(i, "extra_info", None)
        for text in _responses(table, i, e.response_key):
            samples.append(RewardInput(source, text, reference["ground_truth"], extra if isinstance(extra, dict) else None, index=i))
            row_of.append(i)
    return samples, row_of


def summarise(sources: list[str], scores: list[float], row_of: list[int]) -> list[SourceScore]:
    """The table from each row's data source and each response's score (``row_of``: its row).

    >>> summarise(["a", "a", "b"], [1.0, 0.0, 1.0, 0.5, 0.5], [0, 0, 1, 2, 2])
    [SourceScore(data_source='a', rows=2, responses=3, test_score=0.75), SourceScore(data_source='b', rows=1, responses=2, test_score=0.5)]
    """
    per_row: dict[int, list[float]] = {}
    for row, score in zip(row_of, scores):
        per_row.setdefault(row, []).append(score)
    by_source: dict[str, list[int]] = {}
    for row, source in enumerate(sources):
        by_source.setdefault(source, []).append(row)
    out = []
    for source, rows in by_source.items():  # in the order the file first names them
        means = [sum(per_row[r]) / len(per_row[r]) for r in rows]  # a row weighs 1 however many responses it has
        out.append(SourceScore(source, len(rows), sum(len(per_row[r]) for r in rows), sum(means) / len(means)))
    return out


def format_table(result: EvalResult) -> str:
    """The printed table, one line per data source (verl's metric name first)."""
    names = [f"test_score/{s.data_source}" for s in result.sources]
    width = max([len("metric"), *map(len, names)])
    lines = [f"{'metric':<{width}}  {'rows':>6}  {'responses':>9}  {'score':>8}"]
    for name, s in zip(names, result.sources):
        lines.append(f"{name:<{width}}  {s.rows:>6}  {s.responses:>9}  {s.test_score:>8.4f}")
    if result.failures:
        lines.append(f"{result.failures} responses could not be scored and count as reward.failure_reward (reward.on_error: fixed)")
    return "\n".join(lines) + "\n"


def write_table(result: EvalResult, out: str | Path) -> Path:
    """Write the table as JSON (``scores``: verl's metric dict; ``table``: the lines) or CSV."""
    out = Path(out)
    rows = [{"data_source": s.data_source, "rows": s.rows, "responses": s.responses, "test_score": s.test_score} for s in result.sources]
    if out.suffix == ".json":
        text = json.dumps({"file": result.path, "scores": result.metrics(), "table": rows, "failures": result.failures}, indent=2) + "\n"
    elif out.suffix == ".csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(SourceScore.__dataclass_fields__), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buffer.getvalue()
    else:
        raise UserError(f"--output {out}: write the table to a .json or .csv file")
    return atomic_write_text(out, text)


def _check_built_in(first: dict[str, str]) -> None:
    """Each data source has a built-in scorer (the default reward function): a DataError names the
    first row of one that has none, and the known ones. ``first``: data source -> where it first occurs."""
    from posttrain.tasks import task_for_data_source

    for source, where in first.items():
        try:
            task_for_data_source(source)
        except DataError as err:
            raise DataError(f"{where}: {err} (set reward.custom_reward_function.path; in verl's "
                            "evaluation.yaml custom_reward_function.path)") from None


def _check_reward(cfg: Config) -> None:
    """Refuse the scorers that need the prompts, which posttrain eval does not read."""
    if cfg.reward.reward_model.enable:
        raise ConfigError("reward.reward_model.enable: posttrain eval scores with the reward function, as verl's main_eval does; "
                          "the reward model is not run: set reward.reward_model.enable=false")
    judges = [name for name, w in cfg.reward.workers.items() if w.worker_cls == JUDGE]
    if judges:
        raise ConfigError(f"reward.workers.{judges[0]}: an LLM judge reads each row's question, and posttrain eval reads only the "
                          "responses and the ground truth; score with rule-based workers or a reward function")


def _checked_path(cfg: Config) -> str:
    path = cfg.eval.path
    if not path:
        raise ConfigError("eval.path: give the file of generated responses to score (eval.path=FILE, or data.path=FILE in verl's evaluation.yaml)")
    if Path(path).suffix.lower() not in FORMATS:
        raise ConfigError(f"eval.path: {path} is not a parquet or jsonl file; posttrain eval reads {' or '.join(FORMATS)}")
    if not Path(path).expanduser().is_file():
        raise DataError(f"eval.path: {path}: file not found")
    return path


def _responses(table: RowTable, i: int, column: str) -> list[str]:
    """A row's responses: a list of strings, or one string."""
    value = table.get(i, column, setting="eval.response_key")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) for t in texts):
        raise DataError(f"{table.locate(i, column)} is {_shown(value)}; posttrain eval scores a list of response strings "
                        "(or one string) per row; set eval.response_key to the column holding them")
    return list(texts)


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _score(cfg: Config, samples: list[RewardInput], path: str, first: dict[str, str]):
    """Every response's score, by reward.custom_reward_function (or reward.workers, each data source
    a tag: ``first`` says where each first occurs) through the configured manager; a reward error
    names the file (its "sample" number is the file's row)."""
    fn = reward_function(cfg)
    routed = isinstance(fn, dict)
    aux = start_auxiliary(cfg.reward.auxiliary_models, seed=cfg.trainer.seed, cluster=cfg.cluster)  # a chat judge's models
    try:
        manager = build_router(cfg, fn, aux.urls) if routed else build_reward_manager(cfg.reward.reward_manager, fn, **manager_options(cfg))
    except BaseException:
        aux.stop()
        raise
    try:
        if routed:
            manager.check_tags(first)
        return manager.score(samples)
    except RewardFunctionError as err:
        raise RewardFunctionError(f"{path}: {err} (sample N is row N of the file)") from None
    finally:
        manager.close()
        aux.stop()
