"""Weights & Biases: metrics, the resolved config and the validation generations table.

The run's files go under the run directory (``<run dir>/wandb``) unless `tracker_kwargs.log_dir` or
``WANDB_DIR`` names another place. The mode is wandb's own choice (``WANDB_MODE``, a logged-in
account, ...) unless `tracker_kwargs.mode` sets it: ``offline`` writes the run locally, with no
server, for ``wandb sync`` later. Credentials and the server address come from wandb's environment
(``WANDB_API_KEY``, ``WANDB_BASE_URL``).
"""

from __future__ import annotations

import os
from typing import Any

from posttrain.errors import ConfigError
from posttrain.tracking.base import GENERATION_COLUMNS, Generation, TrackedRun, scalars


class WandbTracker:
    """One wandb run per stage; stages of a run share the wandb group named after the experiment."""

    def __init__(self, run: TrackedRun):
        import wandb

        self._wandb = wandb
        opts = run.options
        directory = opts.get("log_dir") or (None if os.environ.get("WANDB_DIR") else str(run.run_dir))
        if directory is not None:
            os.makedirs(directory, exist_ok=True)  # wandb refuses a directory that does not exist
        try:
            self.run = wandb.init(
                project=opts.get("project", run.project),
                name=run.run_name,
                group=opts.get("group", run.experiment if run.label is not None else None),
                entity=opts.get("entity"),
                tags=opts.get("tags"),
                notes=opts.get("notes"),
                mode=opts.get("mode"),
                dir=directory,
                config=run.config,
                # posttrain's console line and log files keep the output: wandb's stream capture
                # would wrap stdout under the progress bar; a fresh run per stage, never a reused one.
                settings=wandb.Settings(console="off", save_code=False),
                reinit="create_new",
            )
        except Exception as err:  # noqa: BLE001 - login, network or server refusals: the user's to fix
            raise ConfigError(
                f"trainer.logger: wandb could not start a run ({type(err).__name__}: {err}); to log without a "
                "server set trainer.tracker_kwargs.mode: offline (or WANDB_MODE=offline)"
            ) from err
        self._rows: list[list[Any]] = []

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(scalars(metrics), step=step)

    def log_generations(self, rows: list[Generation], step: int) -> None:
        """One table of every validation sample so far: a logged wandb table is immutable, and the
        latest one is what its page shows, so each validation logs the rows of all validations."""
        self._rows += [g.row() for g in rows]
        table = self._wandb.Table(columns=list(GENERATION_COLUMNS), data=[list(r) for r in self._rows])
        self.run.log({"val/generations": table}, step=step)

    def close(self) -> None:
        self.run.finish()
