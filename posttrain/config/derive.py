"""Values computed from the config (and the training set's size) once, before training starts.

The config itself stays exactly what the user wrote (plus defaults): derived numbers live in a
separate frozen `Derived` record that the trainer holds next to the `Config`. Keeping them apart
means the saved config.yaml re-loads to the same run, and nothing downstream has to know which
numbers were typed and which were computed.

verl semantics, which we follow: the dataloader drops the last incomplete batch, so one epoch is
``floor(rows / data.train_batch_size)`` steps; ``trainer.total_training_steps`` overrides
``trainer.total_epochs × steps per epoch``; ``lr_warmup_steps = -1`` means
``int(lr_warmup_steps_ratio × total steps)``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

from posttrain.config.access import get_path, sampler_batch, world_size
from posttrain.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Derived:
    """Numbers the trainer needs that follow from the config; None where they need the dataset
    size and it is not known (e.g. `config plan` without data files)."""

    train_dataset_size: int | None  # rows in data.train_files
    steps_per_epoch: int | None  # full batches of data.train_batch_size prompts per epoch
    total_training_steps: int | None
    actor_warmup_steps: int | None
    critic_warmup_steps: int | None
    max_model_len: int  # data.max_prompt_length + data.max_response_length
    world_size: int  # training processes (1 on CPU)


def derive(cfg: Any, train_dataset_size: int | None) -> Derived:
    """Compute the derived numbers of a validated config; ``train_dataset_size`` is the number of
    training rows, or None when unknown. Raises `ConfigError` when the data cannot fill a batch or
    warm-up is longer than training."""
    batch, key = sampler_batch(cfg)  # data.gen_batch_size (dynamic sampling's rounds) or data.train_batch_size
    steps_per_epoch = None
    if train_dataset_size is not None:
        steps_per_epoch = train_dataset_size // batch
        if steps_per_epoch == 0:
            raise ConfigError(
                f"data.train_files has {train_dataset_size} rows, fewer than {key} "
                f"({batch}): not one full batch, so no training step would run; lower "
                f"{key} to at most {train_dataset_size} or add data"
            )
    total = get_path(cfg, "trainer.total_training_steps", None)
    if total is None and steps_per_epoch is not None:
        total = get_path(cfg, "trainer.total_epochs", 1) * steps_per_epoch
    return Derived(
        train_dataset_size=train_dataset_size,
        steps_per_epoch=steps_per_epoch,
        total_training_steps=total,
        actor_warmup_steps=_warmup(cfg, "actor.optim", total),
        critic_warmup_steps=_warmup(cfg, "critic.optim", total),
        max_model_len=get_path(cfg, "data.max_prompt_length", 0) + get_path(cfg, "data.max_response_length", 0),
        world_size=world_size(cfg),
    )


def _warmup(cfg: Any, optim: str, total: int | None) -> int | None:
    steps = _warmup_steps(cfg, optim, total)
    decay = get_path(cfg, f"{optim}.lr_decay_steps", None)
    # the decay runs from the end of warm-up to lr_decay_steps: it needs at least one step
    if decay is not None and steps is not None and decay <= steps:
        raise ConfigError(
            f"{optim}.lr_decay_steps ({decay}) ends the decay before warm-up ({steps} steps) is over; "
            f"make it larger than the warm-up, counted from the start of training (as Megatron counts it)"
        )
    return steps


def _warmup_steps(cfg: Any, optim: str, total: int | None) -> int | None:
    steps = get_path(cfg, f"{optim}.lr_warmup_steps", None)
    ratio = get_path(cfg, f"{optim}.lr_warmup_steps_ratio", 0.0)
    if steps is None:
        return None
    if steps < 0:
        if ratio == 0:
            return 0
        if total is None:
            return None
        return int(ratio * total)
    if total is not None and steps > total:
        raise ConfigError(
            f"{optim}.lr_warmup_steps ({steps}) is longer than the run ({total} training steps); "
            f"lower it or use {optim}.lr_warmup_steps_ratio"
        )
    return steps


def count_rows(paths: list[str]) -> int | None:
    """Rows in the given data files, read cheaply (parquet metadata, line counts); None when any
    file is missing or of a kind we cannot count without parsing it all."""
    total = 0
    for name in paths:
        n = _rows_in(Path(name))
        if n is None:
            return None
        total += n
    return total if paths else None


def _rows_in(path: Path) -> int | None:
    if not path.is_file():
        return None
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # heavy import, only when a parquet file is really there

        return pq.read_metadata(path).num_rows
    if suffix == ".jsonl":
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as fh:
            return max(sum(1 for _ in csv.reader(fh)) - 1, 0)  # minus the header row
    if suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None
        return len(rows) if isinstance(rows, list) else None
    return None
