"""ROLL's step-wise env managers (``StepEnvManager``, ``StepConcatEnvManager``, ``AgentNativeStepEnvManager``) onto turn rows.

A ``custom_envs`` entry reaches ``env.custom_envs`` as it is; its ``env_manager_cls``,
``history_length``, ``agent_template`` and ``agent_system_template`` are read there
(posttrain.envs.window_spec: prompt modes ``window``, ``observation_window`` and ``messages``). ROLL's
AgentNativeStepEnvManager renders the conversation its environment returns and reads neither
``agent_template`` nor ``agent_system_template``: an entry it plays has them dropped (ROLL's examples
fill them with placeholders). What the rest of the file means once the training manager plays such an entry:

- ROLL's step managers make one training sample per step (formulate_rollouts): its window prompt and
  its action. That is ``env.train_rows: turn``, whose turn rows take each action's own prompt.
- Advantages: ROLL's outcome estimators (grpo, reinforce, gae) score each step sample by its own
  step reward (placed on the sample's last token), normalise those scores with ``reward_normalization``
  over the step samples of the batch (grouped by traj_group_id, tags or batch) and clip them with
  ``reward_clip`` (compute_response_level_rewards' last branch); grpo and reinforce then take
  discounted returns along the sample's tokens, which with ``gamma`` 1 and no token-level KL give
  every token of the step that score: posttrain's ``step_reward`` estimator, which the config check
  keeps to that case. step_reinforce scores a sample by its discounted return of step rewards and
  gigpo by the weighted sum of the normalised episode score and that return normalised among the
  samples of one state, both normalised over step samples as ROLL's are: ``step_reward`` with
  ``adv_estimator_args.mode`` return or gigpo (posttrain's own step_reinforce and gigpo normalise
  per episode group whatever reward_normalization says). gae is refused: ROLL's GAE ends at each
  step sample's last token, posttrain's runs along the episode's row.
- ROLL's optimizer step takes per_device_train_batch_size x gradient_accumulation_steps samples per
  data-parallel rank, and its samples are steps here: ``env.turn_mini_batch_size`` (turn rows per
  optimizer step, the last taking the rows left over).
- The LR schedule: ROLL steps it after every optimizer update and sizes it before any step sample is
  counted, as if each step trained rollout_batch_size trajectories (set_max_steps in
  roll/configs/base_config.py, then divided by the data-parallel ranks in its strategies):
  ``max(1, max_steps x rollout_batch_size x ppo_epochs // (per_device_train_batch_size x
  gradient_accumulation_steps)) // ranks`` updates (the critic's without ppo_epochs). With step samples
  (more of them, a number that varies) the run passes that horizon early, and from there Megatron's
  scheduler holds its minimum LR and Hugging Face's linear schedule holds 0, as posttrain's schedule
  does past ``optim.lr_schedule_updates``: ``lr_schedule_unit: update`` with that horizon. Hugging
  Face's cosine (ROLL's fsdp2/deepspeed strategies) rises again past its horizon, which posttrain's
  does not: refused there.
- ``batch_adjust_mode``: ROLL then copies (``copy``, its default), deletes or draws step samples at
  random until a step's count is a multiple of its batch sizes (adjust_batch); posttrain trains every
  step sample once, which the drop reason says.
"""

from __future__ import annotations

from collections.abc import Mapping

from posttrain.config.dialects.translate import Context

_ROLL = "roll.pipeline.agentic.env_manager."
NATIVE_MANAGER = _ROLL + "agent_native_env_manager.AgentNativeStepEnvManager"
STEP_MANAGERS = (_ROLL + "step_env_manager.StepEnvManager", _ROLL + "step_concat_env_manager.StepConcatEnvManager", NATIVE_MANAGER)


def stepped_tags(ctx: Context) -> list[str]:
    """The training manager's tags whose custom_envs entry a step manager plays."""
    envs = ctx.get("custom_envs")
    tags = ctx.get("train_env_manager.tags") or []
    if not isinstance(envs, Mapping) or not isinstance(tags, list):
        return []
    return [t for t in tags if isinstance(envs.get(t), Mapping) and envs[t].get("env_manager_cls") in STEP_MANAGERS]


def native_templates(ctx: Context) -> None:
    """Drop the templates of entries ROLL's AgentNativeStepEnvManager plays: it never reads them."""
    envs = ctx.get("custom_envs")
    if not isinstance(envs, Mapping):
        return
    for tag, entry in envs.items():
        if isinstance(entry, dict) and entry.get("env_manager_cls") == NATIVE_MANAGER:
            for name in ("agent_template", "agent_system_template"):
                if name in entry:
                    # the entries reach env.custom_envs as they are (the section's rule copies the mapping): removed in place
                    del entry[name]
                    ctx.drop(f"custom_envs.{tag}.{name}", "ROLL's AgentNativeStepEnvManager renders the conversation the "
                             "environment returns and never reads it (posttrain: prompt_mode messages)")


def step_env_managers(ctx: Context) -> None:
    native_templates(ctx)
    tags = stepped_tags(ctx)
    if not tags:
        episode_estimator(ctx)
        return
    ctx.set("env.train_rows", "turn", f"custom_envs.{tags[0]}.env_manager_cls",
            "ROLL's step env managers train one sample per step, its own window prompt and its action: posttrain's turn rows")
    step_estimator(ctx)
    if ctx.has("batch_adjust_mode"):
        ctx.consume("batch_adjust_mode")
        ctx.drop("batch_adjust_mode", "with step samples ROLL copies (copy), deletes (delete) or draws (random_sample) step samples at "
                 "random until a step's count is a multiple of its training and inference batch sizes, before its reward normalisation "
                 "(whose statistics then count the copies); posttrain trains and counts every step sample once, the last mini-batch "
                 "of env.turn_mini_batch_size taking the samples left over")


def episode_estimator(ctx: Context) -> None:
    """ROLL's agentic ``grpo`` over episode samples (its trajectory managers) is posttrain's reinforce.

    ROLL's RLVR pipeline makes grpo standardise each prompt's rewards (reward_postprocess sets both
    norm types to group), which posttrain's grpo does; its agentic pipeline does not: the scores are
    normalised by ``reward_normalization`` alone (algorithm.agentic_reward_norm; its default, batch
    and identity, leaves them as they are) and grpo then takes their returns, as reinforce does
    (compute_response_level_rewards, then compute_advantage's reinforce/grpo branch). posttrain's
    grpo on top would standardise the normalised scores a second time, within each environment group."""
    from posttrain.config.dialects.roll_roles import agentic

    if not agentic(ctx) or "adv_estimator" in ctx.handled or ctx.get("adv_estimator") != "grpo":
        return
    ctx.consume("adv_estimator")
    ctx.set("algorithm.adv_estimator", "reinforce", "adv_estimator",
            "ROLL's agentic grpo: the episode scores normalised by reward_normalization only (algorithm.agentic_reward_norm), "
            "then their returns; it does not standardise them per group again as its RLVR grpo (and posttrain's grpo) does")


# ROLL's estimators over step samples and the step_reward mode that is each (posttrain.algorithms.advantages_steps)
STEP_MODES = {"grpo": "reward", "reinforce": "reward", "step_reinforce": "return", "gigpo": "gigpo"}


def step_estimator(ctx: Context) -> None:
    """ROLL's estimators over step samples (module docstring): grpo, reinforce, step_reinforce and
    gigpo become step_reward in the mode that scores a sample as ROLL does; gae is refused."""
    estimator = ctx.get("adv_estimator", "gae")  # ROLL's default
    mode = STEP_MODES.get(estimator)
    if mode is not None:
        ctx.consume("adv_estimator")
        ctx.set("algorithm.adv_estimator", "step_reward", "adv_estimator",
                f"ROLL's {estimator} over step samples: each step sample's score ({_SCORES[mode]}), normalised by "
                "reward_normalization over the step samples and clipped by reward_clip; its returns (gamma 1) give every token "
                "of the step that number")
        if mode != "reward":
            ctx.set("algorithm.adv_estimator_args", {"mode": mode}, "adv_estimator", f"step_reward scores each turn as ROLL's {estimator}")
        for key in _UNREAD[mode]:
            if ctx.has(key):
                ctx.consume(key)
                ctx.drop(key, f"ROLL reads it under gigpo{' or step_reinforce' if key == 'step_reward_gamma' else ''} only, "
                         f"not under {estimator}")
    elif estimator == "gae":
        ctx.refuse("adv_estimator", "gae over step samples: ROLL runs GAE within each step sample, its last token bootstrapping "
                   "from nothing, while posttrain's gae runs along the episode's row, a turn's last token bootstrapping from the "
                   "next turn's value (and its critic's targets follow); with a step env manager use grpo, reinforce, gigpo or "
                   "step_reinforce", "algorithm.adv_estimator", estimator)
    else:
        ctx.refuse("adv_estimator", f"{estimator} over step samples: posttrain translates ROLL's grpo, reinforce, gigpo and "
                   "step_reinforce there", "algorithm.adv_estimator", estimator)


# ROLL's GiGPO settings each mode leaves unread: the weights are gigpo's, the discount step_reinforce's too
_UNREAD = {"reward": ("step_reward_gamma", "step_reward_weight", "episode_reward_weight"),
           "return": ("step_reward_weight", "episode_reward_weight"), "gigpo": ()}
_SCORES = {"reward": "its own step reward", "return": "its discounted return of step rewards, step_reward_gamma",
           "gigpo": "episode_reward_weight x the normalised episode score + step_reward_weight x its discounted return "
                    "normalised among the step samples of the same state"}


def turn_mini_batch(ctx: Context, key: str, samples: int, why: str) -> None:
    """ROLL's optimizer batch of ``samples`` (actor_train's or critic's) counts step samples when the
    training manager plays a step manager: env.turn_mini_batch_size (one value for both roles)."""
    if stepped_tags(ctx):
        ctx.set("env.turn_mini_batch_size", samples, key, f"{why}: step samples (ROLL's step env managers) per optimizer step")


def schedule_horizon(ctx: Context, role: str, section: str, backward: int, ranks: int) -> None:
    """The length ROLL gives ``role``'s LR schedule when its updates run over step samples (module
    docstring): ``backward`` samples per optimizer step on each of ``ranks`` data-parallel ranks."""
    if not stepped_tags(ctx):
        return
    steps, batch = ctx.get("max_steps", 500), ctx.get("rollout_batch_size")  # ROLL's default max_steps
    epochs = ctx.get("ppo_epochs", 1) if role == "actor_train" else 1  # the critic's count has no ppo_epochs
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (steps, batch, epochs, backward, ranks)):
        return  # lr_schedule_unit refuses a decaying schedule without a horizon
    horizon = max(1, steps * batch * epochs // backward) // ranks
    if horizon > 0:
        ctx.set(f"{section}.optim.lr_schedule_updates", horizon, f"{role}.training_args",
                f"ROLL's horizon: max(1, max_steps {steps} x rollout_batch_size {batch}" + (f" x ppo_epochs {epochs}" if role == "actor_train" else "")
                + f" // {backward} samples per optimizer step) // {ranks} data-parallel ranks optimizer updates, sized before its step samples are counted")


def lr_schedule_unit(ctx: Context, role: str, section: str) -> None:
    """The LR schedule of ``role`` when its updates run over step samples (see the module docstring)."""
    args = f"{role}.training_args"
    kind = ctx.get(f"{args}.lr_scheduler_type", "linear")  # ROLL's TrainingArguments default
    warmup = {k: ctx.get(f"{args}.{k}") for k in ("warmup_steps", "warmup_ratio") if ctx.get(f"{args}.{k}")}
    horizon = f"{section}.optim.lr_schedule_updates" in ctx.origin
    strategy = ctx.get(f"{role}.strategy_args.strategy_name")
    if horizon and (kind != "cosine" or strategy == "megatron_train"):  # the kind itself is translated (or refused) as ever
        ctx.set(f"{section}.optim.lr_schedule_unit", "update", args,
                "ROLL steps the LR schedule after every optimizer update, over a horizon fixed in advance (optim.lr_schedule_updates)")
        return
    if kind == "constant" and not warmup:
        ctx.set(f"{section}.optim.lr_schedule_unit", "step", args, "a constant LR without warm-up: the same in every unit")
        return
    what = f"lr_scheduler_type {kind}" + "".join(f", {k} {v}" for k, v in warmup.items())
    if horizon and kind == "cosine":
        ctx.refuse(f"{args}.lr_scheduler_type", f"{what} under {strategy or 'its default strategy'}: ROLL builds Hugging Face's cosine schedule, which past its "
                   "horizon (reached early, as its updates run over step samples) follows the cosine up again, while posttrain's "
                   "holds its final value there as Megatron's does; use megatron_train, or linear or constant", f"{section}.optim.lr_scheduler_type", kind)
        return
    ctx.refuse(f"{args}.lr_scheduler_type", f"{what}: ROLL sizes this schedule from max_steps, rollout_batch_size, ppo_epochs, "
               "per_device_train_batch_size, gradient_accumulation_steps and the data-parallel ranks, and this file does not give "
               "them all as positive whole numbers (or makes the horizon 0 updates), so posttrain cannot size "
               f"{section}.optim.lr_schedule_updates as ROLL would; give them, or use a constant LR without warm-up",
               f"{section}.optim.lr_schedule_unit", kind)
