"""Trinity-RFT environment workflows that posttrain plays on its agent loop (docs/agentic.md).

Each workflow of `WORKFLOWS` plays one episode of its environment per taskset row and makes one
experience of the whole conversation:

- ``frozen_lake_workflow``: FrozenLake, the row's ``seed``, ``size`` and ``p`` columns drawing the
  map (posttrain.envs.trinity_frozen_lake: the workflow's map generator, prompts, action blocks and
  rewards); its ``env_config`` the workflow_args ``env_max_steps``, ``agent_max_steps`` and
  ``is_slippery`` (Trinity's defaults 8, 10, false), ``max_steps`` the ``agent_max_steps``.
  ``workflow_args.desc`` (one fixed map for every row) is refused: the environment draws each row's map.
- ``alfworld_workflow``: ALFWorld (posttrain.envs.trinity_alfworld), the game file named by the row's
  ``format.prompt_key`` column (``game_file`` in Trinity's example) as ``task_desc``; its
  ``max_env_steps`` (default 30) the ``env_config`` and the ``max_steps``. ``step_wise_alfworld_workflow``
  plays the same games and makes every model call an experience with the episode's reward: turn rows
  (``env.train_rows: turn``) under ``multi_step_grpo``, which it needs.
- ``RAFT_alfworld_workflow``: the same games under RAFT's own rules (posttrain.envs.trinity_raft_alfworld:
  its prompt, three reply tags, the stop on three repeated actions, 50 actions, 4096 tokens a reply),
  returning only the won episodes whose every reply holds the tags: ``algorithm.min_score_mask: 1`` and
  ``valid_actions_mask: true`` leave the others out of the losses of the ``raft`` type's SFT loss.
- ``sciworld_workflow``: ScienceWorld (posttrain.envs.trinity_sciworld: the workflow's prompt,
  observations, ``<action>`` parsing and best-score reward), the task named by the row's
  ``format.prompt_key`` column (Trinity's ``task_desc``; ``prompt`` when unset), a JSON string of
  task_name, var_num and jar_path: the entry's ``episode_columns`` maps that column onto the
  environment's ``task_desc`` argument, and its rows need no seed. ``max_steps`` is the workflow's
  fixed 30; it reads no workflow_args.
- ``webshop_workflow``: WebShop (posttrain.envs.trinity_webshop: the workflow's prompt, its refusals of
  actions the page does not offer, the shop's reward on a purchase, -0.1 after 15 actions without
  one), the session named by the row's ``format.prompt_key`` column (``task_id`` in Trinity's
  example) as ``task_desc``; ``max_steps`` the workflow's fixed 15; it reads no workflow_args.

A file naming one becomes an agentic stage:

- ``env.custom_envs.<tag>`` (``frozen_lake``, ``sciworld``): the workflow's ``env_type``, its
  ``env_config`` and ``max_steps``, and ``episode_files`` the taskset's files (instead of
  data.train_files): each step's groups take the next rows, as Trinity's sequential task reader does;
- ``env.train_env_manager``: ``buffer.batch_size`` groups (tasks per step) of ``repeat_times``
  environments; the steps are Trinity's ``total_epochs x rows // batch_size`` (counted from the rows
  when the stage starts: posttrain.trainer.agentic.epoch_steps) unless the file sets ``buffer.total_steps``;
- each evaluation taskset naming it: an entry of its own (``<tag>_eval<i>``) whose rows the
  validation groups play once each (``env.val_env_manager.num_env_groups: 0``), ``repeat_times``
  environments a row.

The workflows score their episodes themselves: a reward function named for one is never called.
Another environment workflow is a row of `WORKFLOWS`: its environment, tag, workflow_args with
Trinity's defaults, the argument that is its max_steps, and what its rows hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_defaults import TRINITY_TASKS_DEFAULT
from posttrain.config.dialects.trinity_files import data_files

_IN = "buffer.explorer_input"


@dataclass(frozen=True)
class EnvWorkflow:
    """One Trinity-RFT environment workflow and the custom_envs entry that plays it."""

    tag: str  # the training entry's tag; evaluation tasksets' entries are <tag>_eval<i>
    env_type: str  # the posttrain environment (posttrain.envs)
    args: dict[str, Any]  # the workflow_args it reads, with Trinity's defaults: the entry's env_config
    max_steps: str | int  # the workflow_arg that is the entry's max_steps, or Trinity's fixed count
    rows: str  # what a taskset row holds (the report's reason)
    reward: str  # how the workflow rewards its episodes (why a reward function is dropped)
    refused_args: dict[str, str] = field(default_factory=dict)  # workflow_args refused, with the reason
    prompt_argument: str | None = None  # the constructor argument that reads the taskset's format.prompt_key column
    turn_rows: bool = False  # a step-wise workflow: every model call is an experience (env.train_rows turn)
    entry: dict[str, Any] = field(default_factory=dict)  # fixed keys of the custom_envs entry (the workflow's own settings)
    keeps: dict[str, Any] = field(default_factory=dict)  # algorithm.* filters: the episodes the workflow returns as experiences
    keeps_why: str = ""  # which episodes those are (the report's reason)


WORKFLOWS = {
    "frozen_lake_workflow": EnvWorkflow(
        "frozen_lake", "trinity_frozen_lake", {"env_max_steps": 8, "agent_max_steps": 10, "is_slippery": False},
        "agent_max_steps", "the rows are the episodes (seed, size, p)", "1.0 on the goal",
        {"desc": "one fixed map for every row; trinity_frozen_lake draws each row's map from its seed, size and p, "
                 "so write the maps' rows (seed, size, p) into the taskset instead"}),
    "sciworld_workflow": EnvWorkflow(
        "sciworld", "trinity_sciworld", {}, 30,  # Trinity's max_env_steps
        "the rows are the episodes (task_desc: task_name, var_num, jar_path)", "its best score / 100",
        prompt_argument="task_desc"),
    "alfworld_workflow": EnvWorkflow(
        "alfworld", "trinity_alfworld", {"max_env_steps": 30}, "max_env_steps",
        "the rows are the episodes (task_desc: the path of a game.tw-pddl file)", "the game's reward when it ends, else -0.1",
        prompt_argument="task_desc"),
    "webshop_workflow": EnvWorkflow(
        "webshop", "trinity_webshop", {}, 15,  # the workflow's fixed max_env_steps
        "the rows are the episodes (task_desc: a shop session number, the row's task_id in Trinity's example)",
        "the shop's reward on a purchase, else -0.1", prompt_argument="task_desc"),
    # the same game, each model call trained as its own row with the episode's reward (multi_step_grpo's turn rows)
    "step_wise_alfworld_workflow": EnvWorkflow(
        "alfworld", "trinity_alfworld", {"max_env_steps": 30}, "max_env_steps",
        "the rows are the episodes (task_desc: the path of a game.tw-pddl file)", "the game's reward when it ends, else -0.1",
        prompt_argument="task_desc", turn_rows=True),
    # RAFT: its own prompt, reply tags and stops; it returns only the won, well-formatted episodes
    # (the others as empty experiences), which the raft type fine-tunes on
    "RAFT_alfworld_workflow": EnvWorkflow(
        "alfworld", "trinity_raft_alfworld", {}, 50,  # the workflow's fixed max_env_steps
        "the rows are the episodes (task_desc: the path of a game.tw-pddl file)", "the game's reward when it ends",
        prompt_argument="task_desc", entry={"max_tokens_per_step": 4096},  # its fixed max_tokens per call
        keeps={"min_score_mask": 1.0, "valid_actions_mask": True},
        keeps_why="only the episodes scored at least 1 whose every reply holds its three tags (the others as empty experiences)"),
}
ENV_WORKFLOWS = tuple(WORKFLOWS)


def env_workflow_of(ctx: Context) -> EnvWorkflow | None:
    """The training taskset's environment workflow, or None when it names another workflow."""
    own = (ctx.get(f"{_IN}.taskset") or {}).get("default_workflow_type") if isinstance(ctx.get(f"{_IN}.taskset"), dict) else None
    return WORKFLOWS.get(own or ctx.get(f"{_IN}.default_workflow_type"))


def plays_environment(ctx: Context) -> bool:
    """Whether the training taskset's workflow is an environment workflow this module translates."""
    return env_workflow_of(ctx) is not None


def tag_of(workflow: EnvWorkflow, training: bool, index: int) -> str:
    return workflow.tag if training else f"{workflow.tag}_eval{index}"


def env_workflow(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, args: dict[str, Any],
                 training: bool, index: int, reward_keys: tuple[str | None, str | None]) -> None:
    """One taskset's environment workflow as an env.custom_envs entry and its manager's tag; the files
    and sizes follow once the tasksets and batch sizes are translated (`episode_sources`)."""
    workflow = WORKFLOWS[name]
    tag = tag_of(workflow, training, index)
    if not training and not plays_environment(ctx):
        ctx.refuse(source, f"workflow {name!r} for an evaluation taskset while the training taskset answers prompts: posttrain "
                           "validates a stage with its own rollout path (an agentic stage's environments, or a prompt stage's "
                           f"data.val_files); evaluate the {workflow.tag} tasks in a stage that trains on them", None, name)
        return
    if workflow.turn_rows and training and ctx.get("algorithm.algorithm_type") != "multi_step_grpo":
        ctx.refuse(source, f"{name} makes every model call an experience with its episode's reward, which posttrain trains as turn "
                           "rows under algorithm_type multi_step_grpo (env.train_rows turn); with "
                           f"{ctx.get('algorithm.algorithm_type')!r} use {name.removeprefix('step_wise_')} (one experience per "
                           "episode) or set algorithm_type multi_step_grpo", None, name)
        return
    for read in reward_keys:
        if read is not None:
            ctx.drop(read, f"{name} rewards its episodes itself ({workflow.reward}) and calls no reward function")
    config = dict(workflow.args)
    for arg, value in args.items():
        key = f"{prefix}.workflow_args.{arg}"
        if arg in workflow.refused_args:
            ctx.refuse(key, workflow.refused_args[arg], None, value)
        elif arg not in workflow.args:
            ctx.refuse(key, f"{name} reads the workflow_args {list(workflow.args) + list(workflow.refused_args)}", None, value)
        else:
            config[arg] = value
            ctx.report.add(_entry(key, f"env.custom_envs.{tag}.env_config.{arg}", value, "the environment's own setting"))
    steps = config[workflow.max_steps] if isinstance(workflow.max_steps, str) else workflow.max_steps
    entry = {"env_type": workflow.env_type, "env_config": config, "max_steps": steps, **workflow.entry}
    if training:
        for key, value in workflow.keeps.items():
            ctx.set(f"algorithm.{key}", value, source, f"{name} returns {workflow.keeps_why}")
    if workflow.prompt_argument is not None:  # the row's task sits in the taskset's prompt column (Trinity's task_desc)
        column = ((item.get("format") or {}) if isinstance(item.get("format"), dict) else {}).get("prompt_key") or "prompt"
        entry["episode_columns"] = {workflow.prompt_argument: column}
    ctx.set(f"env.custom_envs.{tag}", entry, source, f"{name}: Trinity-RFT's environment on posttrain's agent loop "
            f"(posttrain.envs.{workflow.env_type}), one episode per taskset row")
    manager = "env.train_env_manager" if training else "env.val_env_manager"
    tags = ctx.native.setdefault("env", {}).setdefault(manager.split(".")[1], {}).setdefault("tags", [])
    tags.append(tag)


def episode_sources(ctx: Context) -> None:
    """Move the environment tasksets' files from data.* to their entries' episode_files and size the
    managers (the module docstring); nothing when no taskset names an environment workflow."""
    envs = ctx.native_get("env.custom_envs") or {}
    data = ctx.native.get("data") or {}
    trained = next((w for w in WORKFLOWS.values() if w.tag in envs), None)
    if trained is not None:
        _files(ctx, envs[trained.tag], data.pop("train_files", None), f"{_IN}.taskset.path", trained)
        _absent_rows(ctx, f"{_IN}.taskset.path", trained.tag)
        if "response_key" in data:  # the rows name episodes; no workflow of this table reads an answer column
            del data["response_key"]
            _unread(ctx, f"{_IN}.taskset.format.response_key", "the environment workflow scores its episodes itself and reads no answer column")
        columns = envs[trained.tag].get("episode_columns") or {}
        if trained.prompt_argument in columns and data.get("prompt_key") == columns[trained.prompt_argument]:
            del data["prompt_key"]  # the prompt column names each row's episode, not a prompt the model reads
            ctx.report.add(_entry(f"{_IN}.taskset.format.prompt_key", f"env.custom_envs.{trained.tag}.episode_columns.{trained.prompt_argument}",
                                  columns[trained.prompt_argument], f"the column whose text is each row's {trained.prompt_argument}"))
        # buffer.batch_size tasks a step, each played repeat_times times; the steps (unless
        # buffer.total_steps) are counted from the rows when the stage starts: total_epochs x rows // groups
        # (read from the file: the batch rules fill data.train_batch_size and rollout.n after the handlers)
        repeat = (ctx.get(f"{_IN}.taskset") or {}).get("repeat_times") or ctx.get("algorithm.repeat_times", 1)
        ctx.native["env"]["train_env_manager"].update(num_env_groups=ctx.get("buffer.batch_size", TRINITY_TASKS_DEFAULT), group_size=repeat)
    evals, sizes = False, []
    for i, item in enumerate(ctx.get(f"{_IN}.eval_tasksets") or []):
        workflow = next((w for w in WORKFLOWS.values() if tag_of(w, False, i) in envs), None)
        if workflow is None or not isinstance(item, dict):
            continue
        tag = tag_of(workflow, False, i)
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
        _files(ctx, envs[tag], files, f"{_IN}.eval_tasksets[{i}].path", workflow)
        _absent_rows(ctx, f"{_IN}.eval_tasksets[{i}].path", tag)
    for name in ("val_files", "val_file_keys"):
        if name in data and not data[name]:
            del data[name]
    if evals and len(set(sizes)) > 1:
        ctx.refuse(f"{_IN}.eval_tasksets", f"the evaluation tasksets repeat their tasks {sizes} times; posttrain's validation "
                   "environments play every row with one group size (env.val_env_manager.group_size): give them one repeat_times", None, sizes)
    elif evals:  # every row of every evaluation taskset once, repeat_times environments a row
        ctx.native["env"]["val_env_manager"].update(num_env_groups=0, group_size=sizes[0])


def _unread(ctx: Context, key: str, reason: str) -> None:
    """Mark a key translated onto data.* before the environment was known as dropped for `reason`."""
    import dataclasses

    ctx.report.entries = [dataclasses.replace(e, status="dropped", native=None, reason=reason) if e.key == key else e
                          for e in ctx.report.entries]


def _absent_rows(ctx: Context, key: str, tag: str) -> None:
    """A taskset path refused only because it is not on this machine names the environment entry's
    episode_files, not data.*: `config convert` keeps it there (posttrain.config.dialects.report)."""
    import dataclasses

    from posttrain.config.dialects.machine import absent_here

    ctx.report.entries = [dataclasses.replace(e, native=f"env.custom_envs.{tag}.episode_files")
                          if e.key == key and absent_here(e) else e for e in ctx.report.entries]


def _files(ctx: Context, entry: dict[str, Any], files: list[str] | None, key: str, workflow: EnvWorkflow) -> None:
    if files:
        entry["episode_files"] = list(files)
        ctx.report.add(_entry(key, "env.custom_envs.*.episode_files", files, workflow.rows))


def _entry(key: str, native: str, value: Any, reason: str):
    from posttrain.config.dialects.report import Entry

    return Entry(key, "translated", native, value, reason)
