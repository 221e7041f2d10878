"""Console, JSONL and TensorBoard trackers, the registry of every tracker, and the fan-out the
trainer holds (see the package docstring)."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from posttrain.config.sections.trainer import REFUSED_LOGGERS
from posttrain.errors import ConfigError
from posttrain.tracking.base import Generation, TrackedRun, Tracker
from posttrain.tracking.options import canonical_options
from posttrain.tracking.progress import StageBar, interactive

# Metrics shown on the one compact console line, in this order, when present.
CONSOLE_KEYS = (
    ("critic/score/mean", "score"),
    ("critic/rewards/mean", "reward"),
    ("val/score/mean", "val"),
    ("actor/pg_loss", "pg"),
    ("actor/entropy", "ent"),
    ("actor/ppo_kl", "kl"),
    ("actor/kl_loss", "kl_loss"),
    ("critic/vf_loss", "vf"),
    ("sft/loss", "loss"),
    ("dpo/accuracy", "acc"),
    ("actor/grad_norm", "gnorm"),
    ("actor/lr", "lr"),
    ("response_length/mean", "len"),
    ("perf/tokens_per_s", "tok/s"),
    ("timing/step_s", "s/step"),
)


def _fmt(value: float) -> str:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.2e}"
    return f"{value:.4f}".rstrip("0")


def format_console_line(
    metrics: dict[str, float], step: int, total_steps: int | None, eta_s: float | None, label: str | None = None
) -> str:
    """One compact line per step: ``[stage] step 3/40 | score 0.41 | ... | eta 1m20s``."""
    head = f"step {step}/{total_steps}" if total_steps else f"step {step}"
    parts = [f"[{label}] {head}" if label else head]
    for key, short in CONSOLE_KEYS:
        if key in metrics:
            parts.append(f"{short} {_fmt(metrics[key])}")
    parts += _domain_parts(metrics)
    if eta_s is not None:
        minutes, seconds = divmod(int(round(eta_s)), 60)
        parts.append(f"eta {minutes}m{seconds:02d}s")
    return " | ".join(parts)


def _domain_parts(metrics: dict[str, float]) -> list[str]:
    """``val[sort] 0.41`` for each data source's validation score when there are several domains
    (`val/<source>/score/mean@n`; the source's last path part names it).

    >>> _domain_parts({"val/posttrain/sort/score/mean@1": 0.5, "val/posttrain/arithmetic/score/mean@1": 0.25})
    ['val[sort] 0.5', 'val[arithmetic] 0.25']
    >>> _domain_parts({"val/posttrain/sort/score/mean@1": 0.5})
    []
    """
    found = [(k[len("val/"):k.rindex("/score/mean@")], v) for k, v in metrics.items() if k.startswith("val/") and "/score/mean@" in k]
    if len(found) < 2:
        return []
    return [f"val[{source.rsplit('/', 1)[-1]}] {_fmt(value)}" for source, value in found]


class ConsoleTracker:
    """Prints one line per logged step with an ETA from the mean step time so far; with a `bar`
    (an interactive terminal) the lines print above the stage's progress bar."""

    def __init__(
        self,
        total_steps: int | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        step_offset: int = 0,
        label: str | None = None,
        bar: StageBar | None = None,
    ):
        """`step_offset`: global step of the stage's step 0, so lines show the stage's own count."""
        self.total_steps = total_steps
        self.step_offset = step_offset
        self.label = label
        self.stream = stream or sys.stdout
        self.clock = clock
        self.bar = bar
        self._start = clock()
        self._first_step: int | None = None

    def log(self, metrics: dict[str, float], step: int) -> None:
        step -= self.step_offset
        if self._first_step is None:
            self._first_step = step - 1
        done = step - self._first_step
        eta = None
        if self.total_steps and done > 0:
            eta = (self.clock() - self._start) / done * max(self.total_steps - step, 0)
        line = format_console_line(metrics, step, self.total_steps, eta, self.label)
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, file=self.stream, flush=True)

    def log_generations(self, rows: list[Generation], step: int) -> None:
        pass  # the console line shows the validation score; the samples are in val_generations.jsonl

    def close(self) -> None:
        pass


class JsonlTracker:
    """Appends ``{"step": n, ...metrics}`` per line to ``metrics.jsonl`` in the run directory."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def log_generations(self, rows: list[Generation], step: int) -> None:
        pass  # the trainer appends them to val_generations.jsonl whichever trackers are named

    def close(self) -> None:
        self._file.close()


def _jsonable(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def _wait_past_event_files(log_dir: Path) -> None:
    """Sleep until the current second is later than every event file's creation second (the
    second is the field after ``events.out.tfevents.`` in the name SummaryWriter gives a file)."""
    seconds = []
    for path in log_dir.glob("events.out.tfevents.*"):
        field = path.name.split(".")[3]
        if field.isdigit():
            seconds.append(int(field))
    if seconds:
        delay = max(seconds) + 1 - time.time()
        if delay > 0:
            time.sleep(delay)


class TensorBoardTracker:
    """Scalars into ``<run_dir>/tensorboard`` (or `log_dir`) via torch's SummaryWriter.

    `purge_step` (a resumed run): TensorBoard discards the earlier events at or after that step,
    so the steps logged again after a resume are not shown twice. The purge applies to events read
    *before* the marker, and TensorBoard reads a directory's event files in name order, which is
    creation time in whole seconds, then host and pid. So a resumed writer starts in a later second
    than every existing file (waiting at most a second); in the same second a smaller pid would
    sort the new file first and the old duplicates would stay."""

    def __init__(self, run_dir: str | Path, purge_step: int | None = None, log_dir: str | Path | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir) if log_dir else Path(run_dir) / "tensorboard"
        if not self.log_dir.is_dir():
            purge_step = None  # nothing written there yet: nothing to purge
        if purge_step is not None:
            _wait_past_event_files(self.log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=purge_step)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def log_generations(self, rows: list[Generation], step: int) -> None:
        pass  # scalars only; the samples are in val_generations.jsonl

    def close(self) -> None:
        self._writer.close()


def _wandb(run: TrackedRun) -> Tracker:
    from posttrain.tracking.wandb_tracker import WandbTracker

    return WandbTracker(run)


def _mlflow(run: TrackedRun) -> Tracker:
    from posttrain.tracking.mlflow_tracker import MlflowTracker

    return MlflowTracker(run)


def _swanlab(run: TrackedRun) -> Tracker:
    from posttrain.tracking.swanlab_tracker import SwanlabTracker

    return SwanlabTracker(run)


# name -> factory(run); the optional trackers import their client only when named.
TRACKERS: dict[str, Callable[[TrackedRun], Tracker]] = {
    "console": lambda run: ConsoleTracker(run.total_steps, step_offset=run.step_offset, label=run.label),
    "jsonl": lambda run: JsonlTracker(run.run_dir),
    "tensorboard": lambda run: TensorBoardTracker(run.run_dir, run.purge_step, run.options.get("log_dir")),
    "wandb": _wandb,
    "mlflow": _mlflow,
    "swanlab": _swanlab,
}


class Trackers:
    """Fan-out to several trackers; the trainer holds exactly one of these.

    `log_freq` (trainer.log_freq, ROLL's logging_steps): only every `log_freq`-th step of the stage
    is sent, plus every step that carries validation metrics (``val/...``) and the stage's last step
    (`total_steps`), so the curves thin out but no validation and no final value is lost. The
    progress `bar` (an interactive terminal) moves on every step."""

    def __init__(self, trackers: list[Tracker], *, log_freq: int = 1, step_offset: int = 0, total_steps: int | None = None,
                 bar: StageBar | None = None):
        self.trackers = trackers
        self.log_freq = log_freq
        self.step_offset = step_offset
        self.total_steps = total_steps
        self.bar = bar

    def log(self, metrics: dict[str, float], step: int) -> None:
        local = step - self.step_offset
        if self.bar is not None:
            self.bar.update(local)
        if self.log_freq > 1 and local % self.log_freq and local != self.total_steps:
            if not any(key.startswith("val/") for key in metrics):
                return
        for tracker in self.trackers:
            tracker.log(metrics, step)

    def log_generations(self, rows: list[Generation], step: int) -> None:
        """Validation samples (at the validation's global `step`) to the trackers that show tables."""
        if rows:
            for tracker in self.trackers:
                tracker.log_generations(rows, step)

    def close(self) -> None:
        """Close every tracker, even when one fails, then raise the first failure."""
        failure: BaseException | None = None
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as err:  # noqa: BLE001 - re-raised below, after the others closed
                failure = failure or err
        if self.bar is not None:
            self.bar.close()
        if failure is not None:
            raise failure


def build_trackers(
    names: list[str],
    run_dir: str | Path,
    total_steps: int | None,
    key: str = "trainer.logger",
    *,
    step_offset: int = 0,
    label: str | None = None,
    purge_step: int | None = None,
    log_freq: int = 1,
    project: str = "posttrain",
    experiment: str = "run",
    config: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    resumed: int = 0,
) -> Trackers:
    """Build the trackers named in the config, refusing unknown or not-supported ones.

    Trackers receive global steps (stages continue each other's count); the console shows the
    stage's own `step - step_offset` out of `total_steps`, prefixed with `label`. `purge_step`
    (resuming) makes TensorBoard drop the earlier run's events from that global step on; `log_freq`:
    see `Trackers`; `config`: the resolved config the trackers record; `options`:
    trainer.tracker_kwargs (checked before by `check_trackers`); `resumed`: stage-local steps done
    before this process started (where the progress bar starts)."""
    for name in names:
        if name in REFUSED_LOGGERS:
            raise ConfigError(f"{key}: tracker {name!r}: {REFUSED_LOGGERS[name]}")
        if name not in TRACKERS:
            raise ConfigError(f"{key}: unknown tracker {name!r}; choose from {', '.join(TRACKERS)}")
    run = TrackedRun(Path(run_dir), total_steps, step_offset, label, project, experiment, dict(config or {}),
                     canonical_options(options or {}), purge_step)
    bar = None
    if "console" in names and total_steps and interactive():
        bar = StageBar(total_steps, sys.stdout, label, initial=resumed)
    built: list[Tracker] = []
    try:
        for name in names:
            tracker = TRACKERS[name](run)
            if isinstance(tracker, ConsoleTracker):
                tracker.bar = bar
            built.append(tracker)
    except BaseException:
        with contextlib.suppress(Exception):  # a tracker failed to start: finish the ones already started
            Trackers(built, bar=bar).close()
        raise
    return Trackers(built, log_freq=log_freq, step_offset=step_offset, total_steps=total_steps, bar=bar)
