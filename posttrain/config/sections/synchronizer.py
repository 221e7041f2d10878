"""`synchronizer`: how trained weights reach the generating side in a decoupled run.

In posttrain's synchronous loop the rollout engine reads the actor's weights after every update, which
is sync_interval 1 with sync_offset 0; other values wait for the decoupled explorer/trainer issue.
"""

from __future__ import annotations

from posttrain.config.fields import param, section

_TODO = "decoupled explorer/trainer issue"


@section
class SynchronizerConfig:
    """Weight synchronisation between trainer and explorer."""

    sync_method: str = param("nccl", doc="nccl broadcasts weights between live processes; checkpoint has the explorer load the newest saved weights.", choices=["nccl", "checkpoint"], todo=_TODO, refs=["trinity:synchronizer.sync_method"])
    sync_interval: int = param(1, doc="Training steps between weight synchronisations.", ge=1, todo=_TODO, refs=["trinity:synchronizer.sync_interval", "roll:actor_train.model_update_frequency"])
    sync_offset: int = param(0, doc="Steps the explorer runs ahead before the trainer starts.", ge=0, todo=_TODO, refs=["trinity:synchronizer.sync_offset"])
    sync_timeout: float = param(1200.0, doc="Seconds one synchronisation may take before it fails.", gt=0, todo=_TODO, refs=["trinity:synchronizer.sync_timeout"])
    sync_style: str = param("fixed", doc="fixed syncs every sync_interval trainer steps; dynamic_by_explorer syncs when the explorer has run sync_interval steps.", choices=["fixed", "dynamic_by_explorer"], todo=_TODO, refs=["trinity:synchronizer.sync_style"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}
