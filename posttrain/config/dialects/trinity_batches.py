"""Trinity-RFT's batch sizes: tasks per explore step and experiences per trainer step.

In Trinity-RFT (its config validator and verl trainer config) ``buffer.batch_size`` is the tasks the
explorer runs per explore step (default 1), each ``algorithm.repeat_times`` times, and
``buffer.train_batch_size`` the experiences its trainer reads per trainer step (default batch_size x
repeat_times; required in mode ``train`` and for ``sft``/``dpo``). The trainer's verl actor takes one
optimizer step per trainer step (its ``ppo_mini_batch_size`` is set to train_batch_size). The ``mix``
types' expert rows are part of train_batch_size (``algorithm.mix.expert_batch_size`` of them).

posttrain's trainer trains each step on exactly one explored batch: ``data.train_batch_size`` prompts
x ``rollout.n`` responses, in ``actor.ppo_mini_batch_size`` prompts per optimizer step. So:

- RL, mode both (and colocate): a trainer step of batch_size x repeat_times experiences (the default)
  is one explored batch, one optimizer step: ``actor.ppo_mini_batch_size`` = batch_size. A
  train_batch_size of another size makes Trinity-RFT's trainer and explorer step at different rates
  (a trainer step spans several explore steps, or part of one, with the explorer running ahead), which
  posttrain's step of one explored batch cannot reproduce: refused, naming the batch_size that matches.
- RL, mode both, ``math_trainable_ruler_workflow``: an explore step writes the responses plus the
  judge replies of the tasks whose ground truth counts (reward.self_judge), between batch_size x
  repeat_times and twice that; a train_batch_size in that range (the example's 960 for 768
  responses) is read as one trainer step per explore step, all its rows in one optimizer step.
- RL, mode train: the trainer alone reads what an explore run stored: a step of train_batch_size
  experiences is a batch of train_batch_size / repeat_times prompts (``data.train_batch_size``, one
  optimizer step). buffer.batch_size, the explorer's, plays no part.
- RL, mode explore (and bench, serve): no trainer; train_batch_size changes nothing.
- ``multi_step_grpo``: Trinity-RFT's experiences are the turns of episodes (one per model call of a
  run), and each trainer step takes train_batch_size of them (default batch_size x repeat_times) in
  one optimizer step. posttrain trains on turn rows (``env.train_rows: turn``) in mini-batches of
  ``env.turn_mini_batch_size`` = train_batch_size turn rows: a step explores batch_size tasks x
  repeat_times episodes and takes as many optimizer steps as their turns fill, the last taking the
  turns left over (Trinity-RFT's trainer carries them into its next step instead). Over a single-turn
  workflow a turn is a response; over an agent function's episodes a turn is a recorded call, and each
  episode counts once in the advantages (posttrain.trainer.advantages.episode_advantages). Mode train: refused as before (a stored batch is a batch of episodes).
  An environment workflow that makes one experience of a whole episode (alfworld_workflow, not
  step_wise_alfworld_workflow) gives one experience per run, so there multi_step_grpo is grpo's
  rule above: episode rows.
- SFT and DPO: train_batch_size sequences (DPO: pairs) per step is ``data.train_batch_size``.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_judges import SELF_JUDGE, SELF_JUDGE_GOLD_PROBABILITY, training_workflow
from posttrain.config.dialects.trinity_algorithms import TYPES
from posttrain.config.dialects.trinity_defaults import TRINITY_TASKS_DEFAULT
from posttrain.config.dialects.trinity_envs import env_workflow_of
from posttrain.config.tables import Rule

KEY, TASKS = "buffer.train_batch_size", "buffer.batch_size"
_MINI = "actor.ppo_mini_batch_size"


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def batch_sizes(ctx: Context) -> None:
    """The rules of the module docstring, for the whole file."""
    _sizes(ctx, stage=False)


def stage_batch_sizes(ctx: Context) -> None:
    """The same for one stage, which takes the file's batch_size when it names none."""
    _sizes(ctx, stage=True)


def _sizes(ctx: Context, stage: bool) -> None:
    given = ctx.has(KEY)
    if stage and not given and not ctx.has(TASKS):
        return  # the stage keeps the file's batches
    ctx.consume(KEY)
    experiences = ctx.get(KEY)
    if given and not _whole(experiences):
        ctx.refuse(KEY, f"expected a whole number of experiences (>= 1), got {experiences!r}", None, experiences)
        return
    type_name = ctx.get("algorithm.algorithm_type", "ppo")
    kind = TYPES[type_name].kind if type_name in TYPES else "rl"
    mode = ctx.get("mode", "both")
    if kind in ("sft", "dpo"):
        if given:
            unit = "pairs" if kind == "dpo" else "sequences"
            ctx.set("data.train_batch_size", experiences, KEY, f"{experiences} {unit} per {kind.upper()} step")
            _tasks_unused(ctx, f"an {kind.upper()} run explores nothing: buffer.train_batch_size sets its step")
        return
    if mode in ("explore", "bench", "serve"):
        if given:
            ctx.drop(KEY, f"mode {mode} runs no trainer")
        tasks = ctx.get(TASKS)
        if _whole(tasks) and _MINI not in ctx.origin:  # no optimizer step is taken; one that fits the batch passes the checks
            ctx.set(_MINI, tasks, TASKS, f"mode {mode} runs no trainer: the mini-batch is the explored batch")
        return
    if _MINI in ctx.origin:  # the inline verl config (trainer.trainer_config) set it: that wins
        return
    if type_name == "multi_step_grpo" and mode != "train" and _turn_experiences(ctx):
        _turns(ctx, given, experiences)
        return
    if given and type_name == "multi_step_grpo":
        ctx.refuse(KEY, "mode train with multi_step_grpo: a trainer step of so many turns, while posttrain's mode train reads the "
                        "batches an explore run stored, each the episodes of batch_size tasks; leave train_batch_size out "
                        "(a step is then one stored batch)", _MINI, experiences)
        return
    repeat = ctx.get("algorithm.repeat_times", 1)
    expert = ctx.origin.get("algorithm.mix.expert_batch_size")  # the mix types' expert rows ride along
    explored = experiences - expert[1] if given and expert is not None else experiences
    if given and (not _whole(repeat) or explored % repeat):
        ctx.refuse(KEY, f"{explored!r} explored experiences is not a whole number of prompts at repeat_times {repeat!r}", _MINI, experiences)
        return
    if mode == "train":
        _train_only(ctx, given, explored, repeat, expert)
    else:
        _both(ctx, given, explored, repeat, expert, stage)


def _turn_experiences(ctx: Context) -> bool:
    """Whether the training workflow writes an experience per model call: any but an environment
    workflow that makes one experience of a whole episode (frozen_lake_workflow, sciworld_workflow,
    alfworld_workflow), under which multi_step_grpo is grpo over episodes."""
    workflow = env_workflow_of(ctx)
    return workflow is None or workflow.turn_rows


def _turns(ctx: Context, given: bool, experiences: Any) -> None:
    """multi_step_grpo, mode both: turn rows in mini-batches of train_batch_size turns (module docstring)."""
    tasks, repeat = ctx.get(TASKS, TRINITY_TASKS_DEFAULT), ctx.get("algorithm.repeat_times", 1)
    if not ctx.has(TASKS) and "data.train_batch_size" not in ctx.origin:
        ctx.set("data.train_batch_size", TRINITY_TASKS_DEFAULT, TASKS, "Trinity-RFT's default batch_size (not written in the file)")
    if not (_whole(tasks) and _whole(repeat)):
        return  # buffer.batch_size / repeat_times are refused by name
    turns = experiences if given else tasks * repeat
    source = KEY if given else TASKS
    ctx.set("env.train_rows", "turn", "algorithm.algorithm_type", "multi_step_grpo trains one experience per turn (model call) of each run")
    ctx.set("env.turn_mini_batch_size", turns, source,
            f"{turns} turns per optimizer step, as Trinity-RFT's trainer takes {turns} experiences (turns) per step" +
            ("" if given else f" (its default, batch_size {tasks} x repeat_times {repeat})") +
            f"; posttrain trains the turns of each explored batch ({tasks} tasks x {repeat} runs), the last mini-batch taking those "
            "left over where Trinity-RFT's trainer carries them into its next step")
    ctx.set(_MINI, tasks, source, "with env.turn_mini_batch_size, mini-batches count turn rows: this only fits the batch")


def experiences_of(explored: Any, expert: Any) -> Any:
    """train_batch_size as written: the explored experiences plus the mix types' expert rows."""
    return explored + expert[1] if expert is not None and isinstance(explored, int) else explored


def _tasks_unused(ctx: Context, why: str) -> None:
    if ctx.has(TASKS):
        ctx.consume(TASKS)
        ctx.drop(TASKS, why)


def _train_only(ctx: Context, given: bool, explored: Any, repeat: int, expert: Any) -> None:
    """Mode train: a step is one stored batch of train_batch_size / repeat_times prompts."""
    if not given:
        return  # Trinity-RFT refuses mode train without it; posttrain's own default applies
    prompts = explored // repeat
    rows = f" (less {expert[1]} expert rows)" if expert is not None else ""
    ctx.set("data.train_batch_size", prompts, KEY, f"mode train: a trainer step of {explored} explored experiences{rows} is one stored batch of {explored} / repeat_times {repeat} prompts")
    ctx.set(_MINI, prompts, KEY, "one optimizer step per trainer step, as Trinity-RFT's verl actor takes")
    _tasks_unused(ctx, "the explorer's tasks per step; mode train explores nothing (the explore run that filled the buffer wrote its batches)")


def _both(ctx: Context, given: bool, explored: Any, repeat: int, expert: Any, stage: bool) -> None:
    """Mode both: one trainer step is one explored batch, or the file is refused."""
    tasks = ctx.get(TASKS, TRINITY_TASKS_DEFAULT)
    if not ctx.has(TASKS) and not stage and "data.train_batch_size" not in ctx.origin:
        ctx.set("data.train_batch_size", TRINITY_TASKS_DEFAULT, TASKS, "Trinity-RFT's default batch_size (not written in the file)")
    if not _whole(tasks):  # the one-to-one rule of buffer.batch_size refuses it by name
        if given:
            ctx.refuse(KEY, f"read against buffer.batch_size, which is not a whole number of tasks ({tasks!r})", _MINI, experiences_of(explored, expert))
        return
    if not given:
        ctx.set(_MINI, tasks, TASKS, "train_batch_size not given: Trinity-RFT's default batch_size x repeat_times, one optimizer step per explored batch")
        return
    if explored != tasks * repeat and training_workflow(ctx) == SELF_JUDGE and tasks * repeat < explored <= 2 * tasks * repeat:
        # the workflow's judge rows (repeat_times per task whose ground truth counts) ride on its responses
        ctx.set(_MINI, tasks, KEY, f"{explored} experiences: {SELF_JUDGE}'s explore step writes batch_size {tasks} x repeat_times "
                                   f"{repeat} = {tasks * repeat} responses plus {repeat} judge replies per task whose ground truth "
                                   f"counts (about {SELF_JUDGE_GOLD_PROBABILITY:.0%} of them), up to {2 * tasks * repeat}, so the trainer "
                                   "steps about as often as the explorer; posttrain trains each explore step's responses and judge rows "
                                   "together, in one optimizer step per explored batch")
        return
    if explored != tasks * repeat:
        rows = f" (train_batch_size less {expert[1]} expert rows)" if expert is not None else ""
        ctx.refuse(KEY, f"Trinity-RFT's trainer takes {explored} explored experiences a step{rows} while its explorer writes batch_size "
                        f"{tasks} x repeat_times {repeat} = {tasks * repeat} a step, so the two step at different rates (the explorer "
                        "running ahead of the trainer); posttrain's trainer trains each step on exactly one explored batch "
                        f"(data.train_batch_size prompts x rollout.n): set buffer.batch_size to {explored // repeat} to explore a "
                        "trainer step at once, or leave train_batch_size out", _MINI, explored)
        return
    ctx.set(_MINI, tasks, KEY, f"{explored} experiences = batch_size {tasks} x repeat_times {repeat}: one optimizer step per explored batch")


RULES: dict[str, Rule] = {
    KEY: Rule(f"{_MINI}, data.train_batch_size", "experiences per trainer step (posttrain.config.dialects.trinity_batches): mode both, "
              "batch_size x repeat_times (the default) is one optimizer step per explored batch (another size is refused: posttrain's "
              "step is one explored batch); mode train, data.train_batch_size = it / repeat_times prompts; SFT/DPO, data.train_batch_size; "
              "multi_step_grpo, env.turn_mini_batch_size turns per optimizer step (env.train_rows turn)",
              16, ((TASKS, 2), ("algorithm.repeat_times", 8))),
}
