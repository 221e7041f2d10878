"""MLflow: metrics, the resolved config (as parameters and as config.yaml) and the validation
generations table, through `MlflowClient` on one run (no global active run).

The tracking URI is `tracker_kwargs.uri`, else ``MLFLOW_TRACKING_URI``, else a file store in the run
directory (``file:<run dir>/mlruns``; ``mlflow ui --backend-store-uri file:<run dir>/mlruns`` shows
it). MLflow keeps its file store in maintenance mode and refuses it unless ``MLFLOW_ALLOW_FILE_STORE``
is set; posttrain sets it (when unset) for a ``file:`` URI, the one store that needs no server and no
database packages. Server credentials come from ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from posttrain.errors import ConfigError
from posttrain.tracking.base import GENERATION_COLUMNS, Generation, TrackedRun, flatten, scalars

MAX_PARAM_CHARS = 6000  # MLflow's limit on one parameter's value
PARAMS_PER_CALL = 100  # MLflow's limit of parameters per log_batch
GENERATIONS_FILE = "val_generations.json"


def mlflow_name(key: str) -> str:
    """A metric or parameter name MLflow accepts: letters, digits, ``_ - . / : space``; ``@`` is
    spelled ``_at_`` (``pass@4``), anything else ``_``.

    >>> mlflow_name("val/score/pass@4")
    'val/score/pass_at_4'
    """
    return re.sub(r"[^\w\-./: ]", "_", key.replace("@", "_at_"))


def tracking_uri(run: TrackedRun) -> str:
    uri = run.options.get("uri") or os.environ.get("MLFLOW_TRACKING_URI")
    return uri or (run.run_dir / "mlruns").resolve().as_uri()


class MlflowTracker:
    """One MLflow run per stage, in the experiment named by the project."""

    def __init__(self, run: TrackedRun):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = tracking_uri(run)
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            self.client = MlflowClient(tracking_uri=uri)
            project = run.options.get("project", run.project)
            experiment = self.client.get_experiment_by_name(project)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
            tags = {"mlflow.note.content": run.options["notes"]} if "notes" in run.options else None
            self.run_id = self.client.create_run(experiment_id, run_name=run.run_name, tags=tags).info.run_id
        except Exception as err:  # noqa: BLE001 - an unreachable server or a refused store: the user's to fix
            raise ConfigError(f"trainer.logger: mlflow could not start a run at {uri} ({type(err).__name__}: {err})") from err
        params = [Param(mlflow_name(k), _param_value(v)) for k, v in sorted(flatten(run.config).items())]
        for start in range(0, len(params), PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=params[start:start + PARAMS_PER_CALL])
        self.client.log_dict(self.run_id, run.config, "config.yaml")
        self._rows: list[list[Any]] = []

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_name(k), v, now, step) for k, v in scalars(metrics).items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def log_generations(self, rows: list[Generation], step: int) -> None:
        """Every validation sample so far in one JSON table (``{"columns", "data"}``, the layout of
        MLflow's own tables), rewritten at each validation."""
        self._rows += [g.row() for g in rows]
        self.client.log_dict(self.run_id, {"columns": list(GENERATION_COLUMNS), "data": self._rows}, GENERATIONS_FILE)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:MAX_PARAM_CHARS]
