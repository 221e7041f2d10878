"""`cluster`: nodes, devices and processes."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class ClusterConfig:
    """Where the run executes."""

    nnodes: int = param(1, doc="Number of nodes.", ge=1, refs=["verl:trainer.nnodes", "trinity:cluster.node_num"])
    n_gpus_per_node: int = param(0, doc="Accelerators per node; 0 runs on CPU in one process.", ge=0, refs=["verl:trainer.n_gpus_per_node", "trinity:cluster.gpu_per_node"])
