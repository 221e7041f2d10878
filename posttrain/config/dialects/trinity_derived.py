"""Trinity-RFT keys its config validator derives, and two it hands to verl in verl's spelling.

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
- ``group`` names the run's group: Trinity-RFT writes checkpoints under
  ``checkpoint_root_dir/project/group/name`` (posttrain's ``trainer.default_local_dir``; without a
  group that is posttrain's own ``root_dir/project_name/experiment_name``) and hands the group to its
  trackers (wandb's run group: ``trainer.tracker_kwargs.group``).
- ``trainer.trainer_config_path`` is deprecated in Trinity-RFT: its validator stops on a path
  without an inline ``trainer.trainer_config`` and ignores it beside one.
- ``algorithm.optimizer.optimizer_type`` becomes the actor's verl ``optim.optimizer``, and for its
  FSDP trainers (trinity/trainer/verl/verl_config.py) ``adam`` and ``adamw`` both become AdamW and
  ``sgd`` SGD; its Megatron trainer's ``adam`` is Megatron's, with decoupled weight decay too. So
  ``adam`` and ``adamw`` are posttrain's ``adamw`` (``adam`` there adds the decay to the gradient
  instead) and ``sgd`` is ``sgd``; the critic keeps its own optimizer.
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


OPTIMIZER = "algorithm.optimizer.optimizer_type"
_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "sgd": "sgd"}


def optimizer_type(ctx: Context) -> None:
    if not ctx.has(OPTIMIZER):
        return
    ctx.consume(OPTIMIZER)
    value = ctx.get(OPTIMIZER)
    name = _OPTIMIZERS.get(value.lower()) if isinstance(value, str) else None
    if name is None:
        ctx.refuse(OPTIMIZER, f"{value!r}: Trinity-RFT's trainers take adam, adamw (both AdamW there) and sgd", "actor.optim.optimizer", value)
    else:
        ctx.set("actor.optim.optimizer", name, OPTIMIZER, "Trinity-RFT's adam is AdamW (decoupled weight decay)" if value.lower() == "adam" else "")


GROUP = "group"


def run_group(ctx: Context) -> None:
    if not ctx.has(GROUP):
        return
    ctx.consume(GROUP)
    group = ctx.get(GROUP)
    if group in ("", None):
        ctx.drop(GROUP, "no group (Trinity-RFT's default): checkpoints under checkpoint_root_dir/project/name")
        return
    if not isinstance(group, str):
        ctx.refuse(GROUP, f"expected a name, got {group!r}", None, group)
        return
    from posttrain.config.sections.trainer import TrainerConfig

    default = TrainerConfig()  # where the file names none of them, posttrain's own, as for a run without a group
    parts = (ctx.get("checkpoint_root_dir") or default.root_dir, ctx.get("project", default.project_name), group,
             ctx.get("name", default.experiment_name))
    ctx.set("trainer.default_local_dir", "/".join(str(p).rstrip("/") for p in parts), GROUP,
            "Trinity-RFT's checkpoint_root_dir/project/group/name")
    ctx.set("trainer.tracker_kwargs.group", group, GROUP, "the trackers' run group, as Trinity-RFT's wandb monitor names it")


CONFIG_PATH = "trainer.trainer_config_path"


def trainer_config_path(ctx: Context) -> None:
    if not ctx.has(CONFIG_PATH):
        return
    ctx.consume(CONFIG_PATH)
    value = ctx.get(CONFIG_PATH)
    if value in ("", None):
        ctx.drop(CONFIG_PATH, "empty (Trinity-RFT's default)")
    elif isinstance(ctx.get("trainer.trainer_config"), dict):
        ctx.drop(CONFIG_PATH, "Trinity-RFT reads the inline trainer.trainer_config and ignores the path beside it")
    else:
        ctx.refuse(CONFIG_PATH, "deprecated: Trinity-RFT's validator stops on it too ('please use trainer_config instead'); "
                                "write the file's verl keys under trainer.trainer_config", None, value)


RULES: dict[str, Rule] = {
    CONFIG_PATH: Rule(None, "dropped beside an inline trainer.trainer_config or empty; refused alone, as Trinity-RFT refuses it", ""),
    GROUP: Rule("trainer.default_local_dir, trainer.tracker_kwargs.group", "checkpoints under checkpoint_root_dir/project/group/name, and the trackers' run group", "g"),
    OPTIMIZER: Rule("actor.optim.optimizer", "adam and adamw -> adamw (Trinity-RFT's trainers run AdamW for both), sgd -> sgd", "adam"),
    KEEP: Rule("trainer.max_actor_ckpt_to_keep, trainer.max_critic_ckpt_to_keep", "both roles' counts, as Trinity-RFT hands it to verl", 2),
    **{f"cluster.{name}": Rule(None, "computed by Trinity-RFT's validator: dropped", 4) for name in _DERIVED},
    **{f"cluster.{name}": Rule(None, "computed from the engines (dropped) except in mode train, where only 0 is accepted", 0)
       for name in _ENGINE_COUNTS},
}
HANDLERS = [derived_gpu_counts, keep_checkpoints, optimizer_type, run_group, trainer_config_path]
