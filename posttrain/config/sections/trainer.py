"""`trainer`: run length, logging, validation and checkpoint cadence."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class TrainerConfig:
    """The training loop around the RL step."""

    project_name: str = param("posttrain", doc="Project name used by trackers and the run directory.", refs=["verl:trainer.project_name", "trinity:project"])
    experiment_name: str = param("run", doc="Experiment name used by trackers and the run directory.", refs=["verl:trainer.experiment_name", "trinity:name"])
    total_epochs: int = param(1, doc="Passes over the training data.", ge=1, refs=["verl:trainer.total_epochs"])
    total_training_steps: int | None = param(None, doc="Training steps; null derives it from total_epochs x steps per epoch.", ge=1, refs=["verl:trainer.total_training_steps"])
