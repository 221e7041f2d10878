"""Trinity-RFT environment workflows that posttrain plays on its agent loop (docs/agentic.md).

Trinity-RFT's ``frozen_lake_workflow`` plays one FrozenLake episode per taskset row (its ``seed``,
``size`` and ``p`` columns draw the map) and makes one experience of the whole conversation. A file
naming it becomes an agentic stage:

- ``env.custom_envs.frozen_lake``: ``env_type: trinity_frozen_lake`` (posttrain.envs.trinity_frozen_lake:
  the workflow's map generator, prompts, action blocks and rewards), its ``env_config`` the
  workflow_args ``env_max_steps``, ``agent_max_steps`` and ``is_slippery`` (Trinity's defaults 8, 10,
  false), ``max_steps`` the ``agent_max_steps``, and ``episode_files`` the taskset's files (instead of
  data.train_files): each step's groups take the next rows, as Trinity's sequential task reader does;
- ``env.train_env_manager``: ``buffer.batch_size`` groups (tasks per step) of ``repeat_times``
  environments; the steps are Trinity's ``total_epochs x rows // batch_size`` (counted from the rows
  when the stage starts: posttrain.trainer.agentic.epoch_steps) unless the file sets ``buffer.total_steps``;
- each evaluation taskset naming it: an entry of its own (``frozen_lake_eval<i>``) whose rows the
  validation groups play once each (``env.val_env_manager.num_env_groups: 0``), ``repeat_times``
  environments a row.

The workflow scores its episodes itself (the goal's 1.0): a reward function named for it is never
called. ``workflow_args.desc`` (one fixed map for every row) is refused: the environment draws each
row's map.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_batches import TRINITY_TASKS_DEFAULT
from posttrain.config.dialects.trinity_files import data_files

ENV_WORKFLOWS = ("frozen_lake_workflow",)
ARGS = {"env_max_steps": 8, "agent_max_steps": 10, "is_slippery": False}  # Trinity-RFT's defaults
_IN = "buffer.explorer_input"


def plays_environment(ctx: Context) -> bool:
    """Whether the training taskset's workflow is an environment workflow this module translates."""
    own = (ctx.get(f"{_IN}.taskset") or {}).get("default_workflow_type") if isinstance(ctx.get(f"{_IN}.taskset"), dict) else None
    return (own or ctx.get(f"{_IN}.default_workflow_type")) in ENV_WORKFLOWS


def tag_of(training: bool, index: int) -> str:
    return "frozen_lake" if training else f"frozen_lake_eval{index}"


def env_workflow(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, args: dict[str, Any],
                 training: bool, index: int, reward_keys: tuple[str | None, str | None]) -> None:
    """One taskset's frozen_lake_workflow as an env.custom_envs entry and its manager's tag; the files
    and sizes follow once the tasksets and batch sizes are translated (`episode_sources`)."""
    tag = tag_of(training, index)
    if not training and not plays_environment(ctx):
        ctx.refuse(source, f"workflow {name!r} for an evaluation taskset while the training taskset answers prompts: posttrain "
                           "validates a stage with its own rollout path (an agentic stage's environments, or a prompt stage's "
                           "data.val_files); evaluate the lake in a stage that trains on it", None, name)
        return
    for read in reward_keys:
        if read is not None:
            ctx.drop(read, f"{name} rewards its episodes itself (1.0 on the goal) and calls no reward function")
    config = dict(ARGS)
    for arg, value in args.items():
        key = f"{prefix}.workflow_args.{arg}"
        if arg == "desc":
            ctx.refuse(key, "one fixed map for every row; trinity_frozen_lake draws each row's map from its seed, size and p, "
                            "so write the maps' rows (seed, size, p) into the taskset instead", None, value)
        elif arg not in ARGS:
            ctx.refuse(key, f"{name} reads the workflow_args {list(ARGS) + ['desc']}", None, value)
        else:
            config[arg] = value
            ctx.report.add(_entry(key, f"env.custom_envs.{tag}.env_config.{arg}", value, "the environment's own setting"))
    entry = {"env_type": "trinity_frozen_lake", "env_config": config, "max_steps": config["agent_max_steps"]}
    ctx.set(f"env.custom_envs.{tag}", entry, source, f"{name}: Trinity-RFT's FrozenLake on posttrain's agent loop "
            "(posttrain.envs.trinity_frozen_lake), one episode per taskset row")
    manager = "env.train_env_manager" if training else "env.val_env_manager"
    tags = ctx.native.setdefault("env", {}).setdefault(manager.split(".")[1], {}).setdefault("tags", [])
    tags.append(tag)


def episode_sources(ctx: Context) -> None:
    """Move the frozen_lake tasksets' files from data.* to their entries' episode_files and size the
    managers (the module docstring); nothing when no taskset names an environment workflow."""
    envs = ctx.native_get("env.custom_envs") or {}
    data = ctx.native.get("data") or {}
    if "frozen_lake" in envs:
        _files(ctx, envs["frozen_lake"], data.pop("train_files", None), f"{_IN}.taskset.path")
        # buffer.batch_size tasks a step, each played repeat_times times; the steps (unless
        # buffer.total_steps) are counted from the rows when the stage starts: total_epochs x rows // groups
        # (read from the file: the batch rules fill data.train_batch_size and rollout.n after the handlers)
        repeat = (ctx.get(f"{_IN}.taskset") or {}).get("repeat_times") or ctx.get("algorithm.repeat_times", 1)
        ctx.native["env"]["train_env_manager"].update(num_env_groups=ctx.get("buffer.batch_size", TRINITY_TASKS_DEFAULT), group_size=repeat)
    evals, sizes = False, []
    for i, item in enumerate(ctx.get(f"{_IN}.eval_tasksets") or []):
        tag = tag_of(False, i)
        if tag not in envs or not isinstance(item, dict):
            continue
        evals = True
        sizes.append(item.get("repeat_times", 1))
        try:
            files = data_files(item.get("path"), item.get("split", "test"), item.get("subset_name"))
        except ValueError:
            files = None  # refused with the taskset's path
        if files:
            data["val_files"] = [f for f in data.get("val_files", []) if f not in files]
            for f in files:
                (data.get("val_file_keys") or {}).pop(f, None)
        _files(ctx, envs[tag], files, f"{_IN}.eval_tasksets[{i}].path")
    for name in ("val_files", "val_file_keys"):
        if name in data and not data[name]:
            del data[name]
    if evals and len(set(sizes)) > 1:
        ctx.refuse(f"{_IN}.eval_tasksets", f"the evaluation tasksets repeat their tasks {sizes} times; posttrain's validation "
                   "environments play every row with one group size (env.val_env_manager.group_size): give them one repeat_times", None, sizes)
    elif evals:  # every row of every evaluation taskset once, repeat_times environments a row
        ctx.native["env"]["val_env_manager"].update(num_env_groups=0, group_size=sizes[0])


def _files(ctx: Context, entry: dict[str, Any], files: list[str] | None, key: str) -> None:
    if files:
        entry["episode_files"] = list(files)
        ctx.report.add(_entry(key, "env.custom_envs.*.episode_files", files, "the rows are the episodes (seed, size, p)"))


def _entry(key: str, native: str, value: Any, reason: str):
    from posttrain.config.dialects.report import Entry

    return Entry(key, "translated", native, value, reason)
