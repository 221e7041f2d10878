"""ROLL's step-wise env managers (``StepEnvManager``, ``StepConcatEnvManager``) onto turn rows.

A ``custom_envs`` entry reaches ``env.custom_envs`` as it is; its ``env_manager_cls``,
``history_length``, ``agent_template`` and ``agent_system_template`` are read there
(posttrain.envs.window_spec: prompt modes ``window`` and ``observation_window``). What the rest of
the file means once the training manager plays such an entry:

- ROLL's step managers make one training sample per step (formulate_rollouts): its window prompt and
  its action. That is ``env.train_rows: turn``, whose turn rows take each action's own prompt.
- Advantages: ROLL's outcome estimators (grpo, reinforce, gae) score each step sample by its own
  step reward, which posttrain's turn rows do not (they carry the episode's advantage): refused;
  gigpo and step_reinforce compute discounted step returns per turn, as posttrain's do.
- ROLL's optimizer step takes per_device_train_batch_size x gradient_accumulation_steps samples per
  data-parallel rank, and its samples are steps here: ``env.turn_mini_batch_size`` (turn rows per
  optimizer step, the last taking the rows left over).
- The LR schedule: ROLL steps it after every optimizer update and sizes it by rollout_batch_size
  trajectories per step, so with step samples (more of them, a number that varies) it runs through
  its warm-up and decay early and by a varying amount per step. posttrain's schedule counted in
  updates needs a fixed count per step (refused with turn rows): a constant LR without warm-up is
  the same in either unit (``lr_schedule_unit: step``); any other schedule is refused.
- ``batch_adjust_mode``: ROLL then copies (``copy``, its default), deletes or draws step samples at
  random until a step's count is a multiple of its batch sizes (adjust_batch); posttrain trains every
  step sample once, which the drop reason says.
"""

from __future__ import annotations

from collections.abc import Mapping

from posttrain.config.dialects.translate import Context

_ROLL = "roll.pipeline.agentic.env_manager."
STEP_MANAGERS = (_ROLL + "step_env_manager.StepEnvManager", _ROLL + "step_concat_env_manager.StepConcatEnvManager")


def stepped_tags(ctx: Context) -> list[str]:
    """The training manager's tags whose custom_envs entry a step manager plays."""
    envs = ctx.get("custom_envs")
    tags = ctx.get("train_env_manager.tags") or []
    if not isinstance(envs, Mapping) or not isinstance(tags, list):
        return []
    return [t for t in tags if isinstance(envs.get(t), Mapping) and envs[t].get("env_manager_cls") in STEP_MANAGERS]


def step_env_managers(ctx: Context) -> None:
    tags = stepped_tags(ctx)
    if not tags:
        return
    ctx.set("env.train_rows", "turn", f"custom_envs.{tags[0]}.env_manager_cls",
            "ROLL's step env managers train one sample per step, its own window prompt and its action: posttrain's turn rows")
    estimator = ctx.get("adv_estimator", "gae")  # ROLL's default
    if estimator not in ("gigpo", "step_reinforce"):
        ctx.refuse("adv_estimator", f"{estimator} over step samples: ROLL scores each step sample by its own step reward (on its "
                   "last token) and normalises that over the group's step samples, while posttrain's turn rows of an outcome "
                   "estimator carry their episode's advantage; with a step env manager use gigpo or step_reinforce, whose "
                   "discounted step returns posttrain computes per turn", "algorithm.adv_estimator", estimator)
    if ctx.has("batch_adjust_mode"):
        ctx.consume("batch_adjust_mode")
        ctx.drop("batch_adjust_mode", "with step samples ROLL copies (copy), deletes (delete) or draws (random_sample) step samples at "
                 "random until a step's count is a multiple of its training and inference batch sizes; posttrain trains every step "
                 "sample once, the last mini-batch of env.turn_mini_batch_size taking the samples left over")


def turn_mini_batch(ctx: Context, key: str, samples: int, why: str) -> None:
    """ROLL's optimizer batch of ``samples`` (actor_train's or critic's) counts step samples when the
    training manager plays a step manager: env.turn_mini_batch_size (one value for both roles)."""
    if stepped_tags(ctx):
        ctx.set("env.turn_mini_batch_size", samples, key, f"{why}: step samples (ROLL's step env managers) per optimizer step")


def lr_schedule_unit(ctx: Context, role: str, section: str) -> None:
    """The LR schedule of ``role`` when its updates run over step samples (see the module docstring)."""
    args = f"{role}.training_args"
    kind = ctx.get(f"{args}.lr_scheduler_type", "linear")  # ROLL's TrainingArguments default
    warmup = {k: ctx.get(f"{args}.{k}") for k in ("warmup_steps", "warmup_ratio") if ctx.get(f"{args}.{k}")}
    if kind == "constant" and not warmup:
        ctx.set(f"{section}.optim.lr_schedule_unit", "step", args, "a constant LR without warm-up: the same in every unit")
        return
    what = f"lr_scheduler_type {kind}" + "".join(f", {k} {v}" for k, v in warmup.items())
    ctx.refuse(f"{args}.lr_scheduler_type", f"{what}: ROLL steps this schedule after every optimizer update and sizes it by "
               "rollout_batch_size trajectories per step, while with a step env manager its updates run over step samples, more "
               "of them and a number that varies from step to step, so its warm-up and decay end early by a varying amount; "
               "posttrain's schedule counted in updates needs a fixed count per step (with turn rows it counts training steps): "
               "use a constant LR without warm-up, or set actor.optim.lr_schedule_unit: step and the schedule in training steps",
               f"{section}.optim.lr_schedule_unit", kind)
