"""Trinity-RFT keys its config validator derives, and the checkpoint count it hands to verl.

- ``cluster.total_gpu_num`` (node_num × gpu_per_node), ``explorer_gpu_num`` (rollout + auxiliary
  models) and the trainer's share (``trainer_gpu_num``, ``trainer_node_num``,
  ``trainer_gpu_num_per_node``: what the explorer leaves) are computed by its validator
  (trinity/common/config_validator.py) in every mode that uses them, over whatever the file says, so
  they are dropped. ``rollout_gpu_num`` and ``auxiliary_model_gpu_num`` are computed from the
  engines (engine_num × tensor_parallel_size) except in mode train, where the file's values take
  their devices from the trainer's: posttrain's trainer takes every device of node_num ×
  gpu_per_node, so there only 0 (the default) is accepted.
- ``trainer.max_checkpoints_to_keep`` is set by Trinity-RFT's verl config as both of verl's
  ``max_actor_ckpt_to_keep`` and ``max_critic_ckpt_to_keep``: posttrain's two keys of those names.
"""

from __future__ import annotations

from posttrain.config.dialects.checkpoints import keep_newest
from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

_DERIVED = ("total_gpu_num", "explorer_gpu_num", "trainer_gpu_num", "trainer_node_num", "trainer_gpu_num_per_node")
_ENGINE_COUNTS = ("rollout_gpu_num", "auxiliary_model_gpu_num")
KEEP = "trainer.max_checkpoints_to_keep"


def derived_gpu_counts(ctx: Context) -> None:
    train = ctx.get("mode", "both") == "train"
    for name in _DERIVED + _ENGINE_COUNTS:
        key = f"cluster.{name}"
        if not ctx.has(key):
            continue
        ctx.consume(key)
        value = ctx.get(key)
        if name in _DERIVED or not train:
            ctx.drop(key, "Trinity-RFT's config validator computes it from node_num, gpu_per_node and the engines, overwriting the file's value")
        elif value not in (0, None):
            ctx.refuse(key, f"in mode train Trinity-RFT takes these {value} devices from its trainer; posttrain's trainer uses every "
                            "device of cluster.node_num × gpu_per_node: lower gpu_per_node instead", None, value)
        else:
            ctx.drop(key, "0: no devices held back from the trainer")


def keep_checkpoints(ctx: Context) -> None:
    keep_newest(ctx, KEEP, (None,), "Trinity-RFT hands it to verl as both roles' checkpoint counts")


RULES: dict[str, Rule] = {
    KEEP: Rule("trainer.max_actor_ckpt_to_keep, trainer.max_critic_ckpt_to_keep", "both roles' counts, as Trinity-RFT hands it to verl", 2),
    **{f"cluster.{name}": Rule(None, "computed by Trinity-RFT's validator: dropped", 4) for name in _DERIVED},
    **{f"cluster.{name}": Rule(None, "computed from the engines (dropped) except in mode train, where only 0 is accepted", 0)
       for name in _ENGINE_COUNTS},
}
HANDLERS = [derived_gpu_counts, keep_checkpoints]
