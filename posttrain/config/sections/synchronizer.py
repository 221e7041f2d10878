"""`synchronizer`: how trained weights reach the generating side in a decoupled run.

In the synchronous loop the rollout engine takes the actor's weights after every update: that is
sync_interval 1 with sync_offset 0 and the fixed style. Other values run `trainer.mode: both` as an
explorer process and a trainer process (posttrain.trainer.decoupled); posttrain.trainer.sync says when
weights move in each sync_style.
"""

from __future__ import annotations

from posttrain.config.fields import param, section

@section
class SynchronizerConfig:
    """Weight synchronisation between trainer and explorer."""

    sync_method: str = param("nccl", doc="How weights travel from trainer to explorer in a decoupled run. nccl (alias online) and memory: the trainer's rank 0 keeps each published state in memory and sends it to each explorer process over a process group (nccl: NCCL from a CUDA trainer, gloo on CPU; memory: gloo from host memory), nothing on disk. checkpoint (alias offline): safetensors files in the run directory. The synchronous loop moves nothing (the engine takes the weights in memory) whatever the value.", choices=["nccl", "checkpoint", "memory", "online", "offline"], refs=["trinity:synchronizer.sync_method"])
    sync_interval: int = param(1, doc="Training steps between weight synchronisations: the trainer publishes its weights every sync_interval steps; above 1 (or with sync_offset) trainer.mode both runs an explorer process and a trainer process.", ge=1, refs=["trinity:synchronizer.sync_interval", "roll:actor_train.model_update_frequency"])
    sync_offset: int = param(0, doc="Extra steps the explorer may run ahead of the trainer's newest weights (on top of sync_interval - 1); above 0 trainer.mode both runs an explorer process and a trainer process.", ge=0, refs=["trinity:synchronizer.sync_offset"])
    sync_timeout: float = param(1200.0, doc="Seconds the explorer waits for weights fresh enough (and the trainer for the explorer's validation) before the run fails, naming what the other side last did.", gt=0, refs=["trinity:synchronizer.sync_timeout"])
    sync_style: str = param("fixed", doc="When weights move (Trinity-RFT's SyncStyle). fixed: the trainer publishes every sync_interval steps and the explorer may not sample batch b before the weights of step b - 1 - (sync_interval - 1 + sync_offset). dynamic_by_explorer: the explorer asks for the trainer's current weights once it has explored sync_interval batches since its last sync, and the trainer answers after its current step. dynamic_by_trainer: the trainer asks for a sync once it has trained sync_interval steps since the last one, and the explorer syncs before its next batch. Either dynamic style runs trainer.mode both as an explorer process and a trainer process; only the buffer's capacity bounds how far the explorer runs ahead, and sync_offset is not read. explorer_driven and trainer_driven (Trinity-RFT 0.5's names) are the same two styles.", choices=["fixed", "dynamic_by_explorer", "dynamic_by_trainer", "explorer_driven", "trainer_driven"], refs=["trinity:synchronizer.sync_style"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}
