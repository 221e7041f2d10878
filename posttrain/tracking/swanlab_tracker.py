"""SwanLab: metrics, the resolved config and the validation generations table.

The run's files go to ``<run dir>/swanlog`` unless `tracker_kwargs.log_dir` or ``SWANLAB_LOG_DIR``
names another place. The mode is SwanLab's own choice (``SWANLAB_MODE``, default online) unless
`tracker_kwargs.mode` sets it: ``offline`` writes the run locally for ``swanlab sync`` later, ``local``
for SwanLab's local dashboard. The API key comes from ``SWANLAB_API_KEY`` or ``swanlab login``.
"""

from __future__ import annotations

import os

from posttrain.errors import ConfigError
from posttrain.tracking.base import GENERATION_COLUMNS, Generation, TrackedRun, scalars


class SwanlabTracker:
    """One SwanLab experiment per stage."""

    def __init__(self, run: TrackedRun):
        import swanlab

        self._swanlab = swanlab
        opts = run.options
        directory = opts.get("log_dir") or os.environ.get("SWANLAB_LOG_DIR") or str(run.run_dir / "swanlog")
        try:
            self.run = swanlab.init(
                project=opts.get("project", run.project),
                workspace=opts.get("workspace"),
                experiment_name=run.run_name,
                description=opts.get("notes"),
                group=opts.get("group"),
                tags=opts.get("tags"),
                logdir=directory,
                mode=opts.get("mode"),
                config=run.config,
                reinit=True,
            )
        except Exception as err:  # noqa: BLE001 - login, network or server refusals: the user's to fix
            raise ConfigError(
                f"trainer.logger: swanlab could not start a run ({type(err).__name__}: {err}); to log without a "
                "server set trainer.tracker_kwargs.mode: offline (or SWANLAB_MODE=offline)"
            ) from err

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(scalars(metrics), step=step)

    def log_generations(self, rows: list[Generation], step: int) -> None:
        """This validation's samples as a table at its step (SwanLab keeps one per step)."""
        table = self._swanlab.echarts.Table()
        table.add(list(GENERATION_COLUMNS), [g.row() for g in rows])
        self.run.log({"val/generations": table}, step=step)

    def close(self) -> None:
        self.run.finish()
