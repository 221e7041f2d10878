"""Values computed from the config (and the training set's size) once, before training starts.

The config itself stays exactly what the user wrote (plus defaults): derived numbers live in a
separate frozen `Derived` record that the trainer holds next to the `Config`. Keeping them apart
means the saved config.yaml re-loads to the same run, and nothing downstream has to know which
numbers were typed and which were computed.

verl semantics, which we follow: the dataloader drops the last incomplete batch, so one epoch is
``floor(rows / data.train_batch_size)`` steps; ``trainer.total_training_steps`` overrides
``trainer.total_epochs × steps per epoch``; ``lr_warmup_steps = -1`` means
``int(lr_warmup_steps_ratio × total steps)``. A role whose ``optim.lr_schedule_unit`` is ``update``
(ROLL's count) has a schedule of ``total steps × updates per step`` steps instead, and its warm-up is
counted in those (rounded up with ``optim.lr_warmup_rounding: ceil``, as Hugging Face rounds);
``optim.lr_schedule_updates`` gives that length outright (ROLL's, with its step env managers).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from posttrain.config.access import get_path, is_rl, sampler_batch, world_size
from posttrain.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Derived:
    """Numbers the trainer needs that follow from the config; None where they need the dataset
    size and it is not known (e.g. `config plan` without data files)."""

    train_dataset_size: int | None  # rows in data.train_files
    steps_per_epoch: int | None  # full batches of data.train_batch_size prompts per epoch
    total_training_steps: int | None
    actor_warmup_steps: int | None  # in steps of the actor's LR schedule (optim.lr_schedule_unit)
    critic_warmup_steps: int | None
    max_model_len: int  # data.max_prompt_length + data.max_response_length, or model.max_model_len when smaller
    world_size: int  # training processes (1 on CPU)
    # each role's LR schedule's length in its own steps (optim.lr_schedule_unit): training steps, or
    # optimizer updates; None: the training steps
    actor_schedule_steps: int | None = None
    critic_schedule_steps: int | None = None


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
    actor_length, critic_length = schedule_length(cfg, "actor", total), schedule_length(cfg, "critic", total)
    return Derived(
        train_dataset_size=train_dataset_size,
        steps_per_epoch=steps_per_epoch,
        total_training_steps=total,
        actor_warmup_steps=_warmup(cfg, "actor.optim", actor_length),
        critic_warmup_steps=_warmup(cfg, "critic.optim", critic_length),
        actor_schedule_steps=actor_length,
        critic_schedule_steps=critic_length,
        max_model_len=longest_sequence(cfg),
        world_size=world_size(cfg),
    )


def longest_sequence(cfg: Any) -> int:
    """The longest prompt + response a row may have: the two limits' sum, or model.max_model_len when
    that is smaller (every response stops at it)."""
    both = get_path(cfg, "data.max_prompt_length", 0) + get_path(cfg, "data.max_response_length", 0)
    cap = get_path(cfg, "model.max_model_len", None)
    return both if cap is None else min(both, cap)


def updates_per_step(cfg: Any, role: str) -> int:
    """Optimizer updates the RL role (actor or critic) makes in one training step: ppo_epochs passes
    over the step's data.train_batch_size prompts in mini-batches of ppo_mini_batch_size prompts (the
    nominal count, as ROLL sizes its schedule; a step whose batch was filtered smaller makes fewer).
    An SFT or DPO step is one update."""
    if not is_rl(cfg):
        return 1
    mini = get_path(cfg, f"{role}.ppo_mini_batch_size", None) or 1
    batch = get_path(cfg, "data.train_batch_size", mini)
    return get_path(cfg, f"{role}.ppo_epochs", 1) * max(1, math.ceil(batch / mini))


def schedule_length(cfg: Any, role: str, total: int | None) -> int | None:
    """The length of `role`'s LR schedule in its own steps (optim.lr_schedule_unit): the training
    steps, or the optimizer updates over them (optim.lr_schedule_updates when given)."""
    unit = get_path(cfg, f"{role}.optim.lr_schedule_unit", "step")
    fixed = get_path(cfg, f"{role}.optim.lr_schedule_updates", None)
    if fixed is not None and unit == "step":
        raise ConfigError(f"{role}.optim.lr_schedule_updates ({fixed}) counts optimizer updates, but {role}.optim.lr_schedule_unit "
                          f"is step (the schedule's length is the training steps); set lr_schedule_unit: update or remove it")
    if fixed is not None:
        return fixed
    if total is None or unit == "step":
        return total
    return total * updates_per_step(cfg, role)


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
        return math.ceil(ratio * total) if get_path(cfg, f"{optim}.lr_warmup_rounding", "floor") == "ceil" else int(ratio * total)
    if total is not None and steps > total:
        unit = "optimizer updates" if get_path(cfg, f"{optim}.lr_schedule_unit", "step") == "update" else "training steps"
        raise ConfigError(
            f"{optim}.lr_warmup_steps ({steps}) is longer than the run ({total} {unit}); "
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
