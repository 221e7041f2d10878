"""Trinity-RFT workflows: which of posttrain's rollout paths a taskset's workflow stands for.

In Trinity-RFT a taskset names a workflow (``default_workflow_type``, else
``buffer.explorer_input.default_workflow_type``; evaluation tasksets fall back to
``default_eval_workflow_type``) that turns each task into experiences. posttrain has three rollout
paths, chosen by the native config rather than by a class per task:

- **single turn** (one response per prompt, scored by the reward function): Trinity's
  ``simple_workflow`` and ``math_workflow`` (and their ``async_`` twins). ``math_workflow`` scores
  with ``math_reward`` unless the taskset names another reward, and with ``math_reward`` it puts the
  DeepSeek-R1 template (posttrain.config.dialects.prompts.R1_SYSTEM_PROMPT) before the question when
  the taskset's ``format.system_prompt`` is unset: ``data.system_prompt``. The messages are then
  Trinity's: the system prompt, the question as the user turn, ``format.reply_prefix`` as the open
  assistant turn.
- **single turn, boxed answers**: Trinity's ``math_boxed_workflow`` (and its ``async_`` twin) scores
  with ``math_boxed_reward`` (posttrain's ``math_boxed`` scorer) unless the taskset names another, and
  without a ``format.system_prompt`` sends its own instruction to box the answer (the ``with_think``
  variant asks for a ``<think>`` block first). Its ``workflow_args``: ``use_base`` prompts a base model
  with plain ``System:/User:/Assistant:`` text (``data.chat_template``: BASE_MODEL_TEMPLATE),
  ``with_think`` and ``format_score_coef`` are math_boxed's format penalty (``reward_kwargs``).
- **single turn, RM-Gallery's reward**: ``math_rm_workflow`` (and ``async_``) sends simple_workflow's
  messages and calls ``rm_gallery_reward`` with the response object; its ``reward_fn_args.reward_name``
  ``math_verify_reward`` is posttrain's ``math_verify_first`` scorer (posttrain.config.dialects.trinity_rm_gallery).
- **single turn, the policy judging itself**: ``math_trainable_ruler_workflow`` is math_workflow's
  rollout and reward (the gold reward) followed by ``reward.self_judge`` (posttrain.trainer.self_judge):
  the policy judges each task's group, its verdicts rewarding the responses of the tasks whose ground
  truth does not count (80% of them, drawn per task) and its judge replies training, against the gold
  reward, on the others. Its evaluation tasksets are scored with the gold reward.
- **single turn with images**: ``simple_mm_workflow`` (and ``async_``): the row's images
  (``format.image_key``: data.image_key) go with its prompt to a vision-language policy, and the
  workflow's own system prompt (`MM_SYSTEM_PROMPT`, which replaces the taskset's) is data.system_prompt.
- **tool-using agent** (`rollout.multi_turn`, docs/agentic.md): posttrain's own name
  ``posttrain_tool_workflow``; its ``workflow_args`` are the ``rollout.multi_turn`` keys
  (tool_config_path, max_assistant_turns, ...).
- **the user's agent function** (`rollout.agent`, docs/agentic.md "Agent functions"): posttrain's own
  name ``posttrain_agent_workflow``, ``workflow_args.function`` naming it (posttrain.config.dialects.trinity_agent);
  with it ``explorer.rollout_model.enable_openai_api`` / ``enable_history`` true are accepted.
- **AgentScope's ReAct agent** (`rollout.agent` with a built-in function): Trinity-RFT's
  ``agentscope_react_workflow`` and ``agentscope_react_math_workflow`` run as posttrain's agent
  functions posttrain.agents.agentscope_react:template_agent / math_agent
  (posttrain.config.dialects.trinity_agentscope); ``agentscopev0_react_math_workflow`` is refused
  (the AgentScope v0 API it imports is gone from the agentscope Trinity-RFT installs).
- **multi-turn environment** (`env.*`): an agentic stage plays environments configured in
  ``env.custom_envs`` and ``env.train_env_manager``. Trinity's environment workflows with a posttrain
  environment (frozen_lake_workflow, sciworld_workflow, alfworld_workflow, step_wise_alfworld_workflow)
  become such a stage, one episode per taskset row (posttrain.config.dialects.trinity_envs), as does
  RAFT_alfworld_workflow (with the ``raft`` type); the others (webshop_workflow, ...) are refused with
  that pointer, RAFT_reflect_alfworld_workflow with what it needs.

Every other workflow is refused naming what it needs. Trinity's registered reward functions
(``default_reward_fn_type`` of the taskset, else of ``buffer.explorer_input``) are posttrain's built-in
scorers of the same values (`REWARDS`), chosen by ``reward.custom_reward_function.name``; they take no
``reward_fn_args``. The others are refused with what they would need (`REFUSED_REWARDS`). Evaluation
tasksets are scored and prompted as the training taskset (posttrain validates with the stage's own
reward and data settings): a different reward or system prompt there is refused as a conflict, except
math_boxed_workflow's ``use_base`` and math_dapo_reward's overlong penalty, which an evaluation
taskset may set otherwise (its files' data.val_file_settings: posttrain.config.dialects.trinity_eval).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.prompts import (
    BASE_MODEL_TEMPLATE, BOXED_SYSTEM_PROMPT, BOXED_THINK_SYSTEM_PROMPT, QWEN_MATH_SYSTEM_PROMPT, QWEN_MATH_USER_SUFFIX, R1_SYSTEM_PROMPT,
)
from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_eval import own_setting
from posttrain.config.sections.data import TOKENIZER_TEMPLATE
from posttrain.config.dialects.trinity_dapo import BOTS, bots_workflow, dapo_overlong
from posttrain.config.dialects.trinity_envs import ENV_WORKFLOWS, env_workflow
from posttrain.config.dialects.trinity_agent import AGENT, agent_workflow
from posttrain.config.dialects.trinity_agentscope import FUNCTIONS as AGENTSCOPE_FUNCTIONS, V0 as AGENTSCOPE_V0, agentscope_workflow
from posttrain.config.dialects.trinity_judges import (
    JUDGE_WORKFLOWS, RULER_FORMAT, SELF_JUDGE, SELF_JUDGE_GOLD_PROBABILITY, SELF_JUDGE_GOLD_RANGE, judge_workflow, training_workflow,
)
from posttrain.config.dialects.trinity_rm_gallery import RM_GALLERY, RM_WORKFLOWS, rm_workflow

_IN = "buffer.explorer_input"
SINGLE_TURN = ("simple_workflow", "async_simple_workflow")
MATH = ("math_workflow", "async_math_workflow")
BOXED = ("math_boxed_workflow", "async_math_boxed_workflow")
BOXED_ARGS = ("use_base", "with_think", "format_score_coef")
TOOL_N1 = ("toolcall_workflow", "tool_call_workflow")  # Trinity-RFT's Tool-N1 workflow, under both of its names
DISTILL_MATH = "on_policy_distill_math_workflow"
TOOLS = "posttrain_tool_workflow"
AGENTSCOPE = (*AGENTSCOPE_FUNCTIONS, AGENTSCOPE_V0)  # Trinity-RFT's AgentScope ReAct workflows (the v0 one refused)
# Trinity-RFT's image workflow: the single-turn rollout with the row's images (data.image_key), and a
# system prompt of its own that replaces the taskset's (trinity/common/workflows/simple_mm_workflow.py).
MM = ("simple_mm_workflow", "async_simple_mm_workflow")
MM_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves MATH problems. You should first thinks about the reasoning process in mind "
    "and then provides the user with the answer. You should present your reasoning process using the format: "
    "<think>\n ...your reasoning process here... </think>\n first. You should always include your final answer in "
    "\\boxed{} as closed-form results."
)
TOOL_ARGS = ("max_assistant_turns", "max_user_turns", "tool_config_path", "interaction_config_path", "format",
             "max_parallel_calls", "max_tool_response_length", "tool_response_truncate_side",
             "use_inference_chat_template", "tokenization_sanity_check_mode")
_ENV = ("plays Trinity's own environment over a taskset of episodes; posttrain plays environments from env.custom_envs "
        "with env.train_env_manager (docs/agentic.md: walk, or your class by module:Class)")
REFUSED = {
    "sudoku_workflow": _ENV,
    "RAFT_reflect_alfworld_workflow": "RAFT's reflective ALFWorld workflow plays a failed game a second time with guidance "
                                      "written from the first attempt and fine-tunes on the second; posttrain's environments play "
                                      "one episode per row: RAFT_alfworld_workflow (one attempt) translates",
    **{name: "Trinity-RFT's fixed math evaluation: its own system message and an instruction appended to the row's 'question' "
             "column, its own sampling (temperature 0.6, top_p 0.8) and Qwen2.5-Math's symbolic equality; posttrain validates "
             "with the training stage's prompt, sampling and reward: use simple_workflow with rollout_args and a reward "
             "function (posttrain's math scorer: reward.custom_reward_function.name: math)"
       for name in ("math_eval_workflow", "async_math_eval_workflow")},
}
# Trinity-RFT's registered reward functions -> the posttrain built-in scorer giving the same scores
# (posttrain.rewards.scorers.BUILTIN_SCORERS), and those refused with what they would need.
REWARDS = {"math_reward": "think_answer", "countdown_reward": "countdown_equation", "math_boxed_reward": "math_boxed",
           "math_dapo_reward": "dapo_math"}
# Reward functions whose constructor takes any arguments and reads none (their reward_fn_args change nothing).
ARGS_IGNORED = ("math_boxed_reward",)
_NATIVE_REWARD = "reward.custom_reward_function.name"
_MATH_NATIVE = "posttrain's math scorer (reward.custom_reward_function.name: math) compares the boxed answer symbolically with math-verify"
REFUSED_REWARDS = {
    "accuracy_reward": f"math-verify with Trinity-RFT's own extraction settings (boxed answers first, no format part); {_MATH_NATIVE}",
    "format_reward": "a format check alone; posttrain's think_answer scorer (reward.custom_reward_function.name: think_answer) adds "
                     "the same +-0.1 format part to the answer's accuracy",
    "rm_gallery_reward": "Trinity-RFT's workflows other than math_rm_workflow call a reward function with the response text and the truth, "
                         "which RM-Gallery's (it wants the response object and the chat messages) cannot take; it runs under "
                         f"{' / '.join(RM_WORKFLOWS)}, where posttrain translates the reward_name {list(RM_GALLERY)}",
}


def workflows(ctx: Context) -> None:
    """Translate or refuse the workflow, workflow_args and reward-function keys of every taskset."""
    default = _take(ctx, f"{_IN}.default_workflow_type")
    default_eval = _take(ctx, f"{_IN}.default_eval_workflow_type")
    for name in ("default_reward_fn_type", "reward_fn_args"):
        _take(ctx, f"{_IN}.{name}")
    taskset = ctx.get(f"{_IN}.taskset")
    if isinstance(taskset, dict):
        _one(ctx, f"{_IN}.taskset", taskset, default, f"{_IN}.default_workflow_type", training=True)
    evals = [item for item in (ctx.get(f"{_IN}.eval_tasksets") or []) if isinstance(item, dict)]
    if default_eval is not None and not evals:  # judged as an evaluation taskset's would be, never silently kept
        _one(ctx, f"{_IN}.default_eval", {}, default_eval, f"{_IN}.default_eval_workflow_type", training=False)
    for i, item in enumerate(ctx.get(f"{_IN}.eval_tasksets") or []):
        if isinstance(item, dict):
            key = f"{_IN}.default_eval_workflow_type" if default_eval is not None else f"{_IN}.default_workflow_type"
            _one(ctx, f"{_IN}.eval_tasksets[{i}]", item, default_eval or default, key, training=False, index=i)
    _unused_default_reward(ctx)


def _take(ctx: Context, key: str) -> Any:
    if ctx.has(key):
        ctx.consume(key)
    return ctx.get(key)


def _own(ctx: Context, prefix: str, item: dict[str, Any], name: str) -> Any:
    """The taskset's own ``name`` (read from the item: an evaluation taskset sits in a list), marked read."""
    ctx.consume(f"{prefix}.{name}")
    return item.get(name)


def _reward_of(ctx: Context, prefix: str, item: dict[str, Any]) -> tuple[Any, str | None, dict[str, Any], str | None]:
    """(reward type, the key naming it, reward_fn_args, the key holding them) of one taskset: its
    own, else buffer.explorer_input's, as Trinity-RFT fills them in."""
    name_key, args_key = f"{prefix}.default_reward_fn_type", f"{prefix}.reward_fn_args"
    own, args = _own(ctx, prefix, item, "default_reward_fn_type"), _own(ctx, prefix, item, "reward_fn_args")
    if own is None:
        own, name_key = ctx.get(f"{_IN}.default_reward_fn_type"), f"{_IN}.default_reward_fn_type"
    if args in (None, {}):
        args, args_key = ctx.get(f"{_IN}.reward_fn_args"), f"{_IN}.reward_fn_args"
    return own, (name_key if own is not None else None), args or {}, (args_key if args else None)


def _reward(ctx: Context, prefix: str, item: dict[str, Any], workflow: Any, source: str) -> Any:
    """Translate the taskset's reward function; returns its Trinity name (None: none named, and the
    workflow has no default one)."""
    name, key, args, args_key = _reward_of(ctx, prefix, item)
    if name is None and workflow in MATH + BOXED + (SELF_JUDGE,):
        name = "math_boxed_reward" if workflow in BOXED else "math_reward"  # the workflow's own default
    if name is None:
        return None
    where = key or source
    why = "" if key else f"{workflow}'s default reward function"
    if name in REWARDS:
        ctx.set(_NATIVE_REWARD, REWARDS[name], where, why or f"Trinity-RFT's {name}: the built-in scorer of the same scores")
        if name == "math_dapo_reward":
            dapo_overlong(ctx, args, args_key or where, training=prefix == f"{_IN}.taskset", taskset=(prefix, item))
        elif args_key is not None and name in ARGS_IGNORED:
            ctx.drop(args_key, f"Trinity-RFT's {name} takes any arguments and reads none")
        elif args_key is not None:
            ctx.refuse(args_key, f"{name} ({REWARDS[name]}) takes no arguments", None, args)
    else:
        reason = REFUSED_REWARDS.get(name, f"unknown to posttrain; the reward functions it translates are {list(REWARDS)}")
        ctx.refuse(where, f"reward function {name!r}: {reason}", _NATIVE_REWARD, name)
        if args_key is not None:
            ctx.drop(args_key, f"the arguments of {name}, which is refused")
    return name


def _unused_default_reward(ctx: Context) -> None:
    """buffer.explorer_input's reward keys when no taskset read them (e.g. an SFT file): Trinity-RFT
    calls the reward only in the workflows of tasksets, so they change nothing there either."""
    for name in ("default_reward_fn_type", "reward_fn_args"):
        key = f"{_IN}.{name}"
        value = ctx.get(key)
        if value not in (None, {}, "") and not any(e.key == key for e in ctx.report.entries):
            ctx.drop(key, "no taskset names a workflow that would call it (Trinity-RFT calls reward functions in taskset workflows only)")


def _one(ctx: Context, prefix: str, item: dict[str, Any], inherited: Any, inherited_key: str, training: bool, index: int = 0) -> None:
    """One taskset's workflow (its own, else the inherited default), workflow_args and reward function."""
    key = f"{prefix}.default_workflow_type"
    own = _own(ctx, prefix, item, "default_workflow_type")
    name = own if own is not None else inherited
    source = key if own is not None else inherited_key
    args = _own(ctx, prefix, item, "workflow_args") or {}
    if name is None or name in SINGLE_TURN + MATH:
        reward = _reward(ctx, prefix, item, name, source)
        _single_turn(ctx, prefix, item, name, source, reward)
        _no_args(ctx, prefix, args, name)
    elif name in RM_WORKFLOWS:  # posttrain.config.dialects.trinity_rm_gallery
        rm_workflow(ctx, prefix, name, source, args, training, _reward_of(ctx, prefix, item))
    elif name in JUDGE_WORKFLOWS:  # posttrain.config.dialects.trinity_judges
        judge_workflow(ctx, prefix, item, name, source, training, REWARDS)
    elif name == SELF_JUDGE:
        _self_judge(ctx, prefix, item, name, source, args, training)
    elif name in ENV_WORKFLOWS:  # posttrain.config.dialects.trinity_envs
        _, name_key, _, args_key = _reward_of(ctx, prefix, item)
        env_workflow(ctx, prefix, item, name, source, args, training, index, (name_key, args_key))
    elif name in BOTS:  # posttrain.config.dialects.trinity_dapo
        bots_workflow(ctx, prefix, item, name, source, args, training, _reward_of(ctx, prefix, item)[1::2])
    elif name in BOXED:
        _boxed(ctx, prefix, item, name, source, _reward(ctx, prefix, item, name, source), args, training)
    elif name in TOOL_N1:
        _tool_n1(ctx, prefix, item, name, source, args, training)
    elif name == DISTILL_MATH:
        _distill_math(ctx, prefix, item, name, source, args, training)
    elif name in MM:
        _reward(ctx, prefix, item, name, source)
        ctx.set("data.system_prompt", MM_SYSTEM_PROMPT, source, f"{name}: the single-turn rollout with the row's images "
                "(data.image_key) and the workflow's own system prompt (dialects.trinity_workflows.MM_SYSTEM_PROMPT)")
        for arg in args:  # its reset() fixes the system prompt and calls the reward with (response, truth) only
            ctx.drop(f"{prefix}.workflow_args.{arg}", f"{name} reads no workflow_args (its system prompt is fixed, its reward "
                                                      "function gets the response and the truth only), so it changes nothing in Trinity-RFT either")
    elif name == AGENT:  # posttrain.config.dialects.trinity_agent: the user's agent function (rollout.agent)
        _, name_key, _, args_key = _reward_of(ctx, prefix, item)
        agent_workflow(ctx, prefix, source, args, training, [k for k in (name_key, args_key) if k is not None])
    elif name in AGENTSCOPE:  # posttrain.config.dialects.trinity_agentscope: AgentScope's ReActAgent as a built-in agent function
        _, name_key, _, args_key = _reward_of(ctx, prefix, item)
        agentscope_workflow(ctx, prefix, item, name, source, args, training, [k for k in (name_key, args_key) if k is not None])
    elif name == TOOLS:
        _reward(ctx, prefix, item, name, source)
        if not training:
            ctx.drop(source, "evaluation uses the training stage's tool calling (rollout.multi_turn)")
            return
        ctx.set("rollout.multi_turn.enable", True, source, "tool-using agent: rollout.multi_turn")
        for arg, value in args.items():
            if arg in TOOL_ARGS:
                ctx.set(f"rollout.multi_turn.{arg}", value, f"{prefix}.workflow_args.{arg}")
            else:
                ctx.refuse(f"{prefix}.workflow_args.{arg}", f"{TOOLS} takes the rollout.multi_turn keys {list(TOOL_ARGS)}", None, value)
    else:
        _, key_read, _, args_read = _reward_of(ctx, prefix, item)
        for read in (key_read, args_read):  # the reward of a refused workflow: named with it, not run
            if read is not None:
                ctx.drop(read, f"the reward function of workflow {name!r} at {source}, which is refused")
        reason = REFUSED.get(name, f"unknown to posttrain; the workflows it translates are {list(SINGLE_TURN + MATH + MM + BOXED + BOTS + TOOL_N1 + JUDGE_WORKFLOWS + RM_WORKFLOWS) + [SELF_JUDGE, DISTILL_MATH, TOOLS, AGENT, *AGENTSCOPE_FUNCTIONS]}")
        ctx.refuse(source, f"workflow {name!r}: {reason}", None, name)


def _single_turn(ctx: Context, prefix: str, item: dict[str, Any], name: Any, source: str, reward: Any) -> None:
    """simple/math workflow: the single-turn rollout; math_workflow with math_reward and no system
    prompt of the taskset's own sends the R1 template as the system message."""
    if name is None:
        return
    if name in MATH and reward == "math_reward" and (item.get("format") or {}).get("system_prompt") is None:
        ctx.set("data.system_prompt", R1_SYSTEM_PROMPT, source,
                f"{name} with math_reward and no format.system_prompt: the DeepSeek-R1 template (posttrain.config.dialects.prompts.R1_SYSTEM_PROMPT)")
    else:
        system = (item.get("format") or {}).get("system_prompt")
        note = "" if name not in MATH else (", with the taskset's format.system_prompt" if system is not None
                                            else f" ({name} adds its system prompt only with math_reward)")
        ctx.drop(source, "posttrain's single-turn rollout: one response per prompt, scored by the reward function" + note)


def _self_judge(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, args: dict[str, Any], training: bool) -> None:
    """math_trainable_ruler_workflow: math_workflow's rollout and reward (the gold reward), then the
    policy judges each group (reward.self_judge: posttrain.trainer.self_judge). An evaluation taskset
    is scored by the gold reward alone."""
    reward = _reward(ctx, prefix, item, name, source)
    _no_args(ctx, prefix, args, name)
    if not training:
        if name == training_workflow(ctx):
            ctx.drop(source, "validation scores the responses with the gold reward (its accuracy part is the example's eval accuracy); "
                             "Trinity-RFT's evaluation runs the judge too and mixes its verdicts into the evaluation reward")
        else:
            ctx.refuse(source, f"an evaluation taskset under {name} while the training taskset runs {training_workflow(ctx)!r}: posttrain's "
                               "self-judge is a setting of the training stage (reward.self_judge)", None, name)
        return
    if reward == "math_reward" and (item.get("format") or {}).get("system_prompt") is None:
        ctx.set("data.system_prompt", R1_SYSTEM_PROMPT, source, f"{name} with math_reward and no format.system_prompt: the DeepSeek-R1 template")
    ctx.set("reward.self_judge.enable", True, source, "the policy judges each task's group of responses (its own RULER request) and "
                                                      "trains on its verdicts where the gold reward counts")
    ctx.set("reward.self_judge.gold_probability", SELF_JUDGE_GOLD_PROBABILITY, source, "the workflow's share of tasks whose ground truth counts")
    ctx.set("reward.self_judge.gold_range", list(SELF_JUDGE_GOLD_RANGE), source, "the workflow maps the gold reward from [-0.1, 1.1] onto [0, 1]")
    ctx.set("reward.self_judge.instructions", RULER_FORMAT, source, "the workflow tells the judge the answer format the question asked for")


def _no_args(ctx: Context, prefix: str, args: dict[str, Any], name: Any) -> None:
    for arg, value in args.items():
        ctx.refuse(f"{prefix}.workflow_args.{arg}", f"the single-turn rollout ({name or 'default'}) takes no workflow_args", None, value)


def _boxed(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, reward: Any, args: dict[str, Any], training: bool) -> None:
    """math_boxed_workflow: the single-turn rollout with its system prompt (the taskset's, else its
    own: posttrain.config.dialects.prompts), a base model's plain-text prompt with use_base
    (data.chat_template), and with_think / format_score_coef passed to its reward (math_boxed's
    reward_kwargs). An evaluation taskset must prompt and score as the training one does."""
    for arg, value in args.items():
        if arg not in BOXED_ARGS:
            ctx.refuse(f"{prefix}.workflow_args.{arg}", f"{name} reads the workflow_args {list(BOXED_ARGS)}", None, value)
    where = {arg: f"{prefix}.workflow_args.{arg}" if arg in args else source for arg in BOXED_ARGS}
    think, base = bool(args.get("with_think", False)), bool(args.get("use_base", False))
    if (item.get("format") or {}).get("system_prompt") is None:
        ctx.set("data.system_prompt", BOXED_THINK_SYSTEM_PROMPT if think else BOXED_SYSTEM_PROMPT, where["with_think"],
                f"{name}'s own system prompt" + (" with with_think" if think else "") + " (posttrain.config.dialects.prompts)")
    if base and (item.get("format") or {}).get("reply_prefix"):
        ctx.refuse(where["use_base"], f"{name}'s base-model prompt leaves out format.reply_prefix, which posttrain writes into every prompt; unset one", None, True)
    elif training or ctx.native_get("data.chat_template") == (BASE_MODEL_TEMPLATE if base else None):
        _as_training(ctx, where["use_base"], "data.chat_template", BASE_MODEL_TEMPLATE if base else None, training,
                     "use_base", "a base model's plain-text prompt (posttrain.config.dialects.prompts.BASE_MODEL_TEMPLATE)")
    elif not own_setting(ctx, prefix, item, "chat_template", BASE_MODEL_TEMPLATE if base else TOKENIZER_TEMPLATE, where["use_base"],
                         f"use_base {'on' if base else 'off'} in this evaluation taskset only: its prompts in "
                         + ("a base model's plain text (BASE_MODEL_TEMPLATE)" if base else "the tokenizer's chat template")):
        _as_training(ctx, where["use_base"], "data.chat_template", BASE_MODEL_TEMPLATE if base else None, training, "use_base", "")
    if reward != "math_boxed_reward":
        for arg in ("with_think", "format_score_coef"):
            if arg in args:
                ctx.refuse(where[arg], f"{name} passes {arg} to its reward function; posttrain reads it for math_boxed_reward only", None, args[arg])
    else:
        _boxed_reward_args(ctx, args, where, think, training)
    if not any(e.key == source for e in ctx.report.entries):
        ctx.drop(source, f"{name}: posttrain's single-turn rollout, one response per prompt scored by the reward function")


def _boxed_reward_args(ctx: Context, args: dict[str, Any], where: dict[str, str], think: bool, training: bool) -> None:
    """with_think and format_score_coef as math_boxed's reward_kwargs (left out at their defaults)."""
    kwargs = "reward.custom_reward_function.reward_kwargs"
    _as_training(ctx, where["with_think"], f"{kwargs}.with_think", think or None, training, "with_think", "math_boxed's format penalty")
    coef = args.get("format_score_coef", 0.1) if think else None
    if not think and "format_score_coef" in args:
        ctx.drop(where["format_score_coef"], "the format penalty's size, with with_think off: no penalty, as in Trinity-RFT")
    else:
        _as_training(ctx, where["format_score_coef"], f"{kwargs}.format_score_coef", coef if coef != 0.1 else None, training, "format_score_coef", "the format penalty's size")


def _as_training(ctx: Context, key: str, native: str, value: Any, training: bool, what: str, reason: str) -> None:
    """Set ``native`` from the training taskset (None: leave it unset); an evaluation taskset's value
    must be what the training one left there, since posttrain validates with the training settings."""
    explicit = ".workflow_args." in key
    if training:
        if value is not None:
            ctx.set(native, value, key, reason)
        elif explicit:
            ctx.drop(key, f"off: Trinity-RFT's default ({reason})")
        return
    trained = ctx.native_get(native)
    if trained == value and explicit:
        ctx.drop(key, "as the training taskset: posttrain validates with the training prompts and reward")
    elif trained != value:
        ctx.refuse(key, f"the evaluation taskset's {what} differs from the training taskset's ({native} "
                        f"{'unset' if trained is None else repr(trained) if len(repr(trained)) < 40 else 'set'}): posttrain "
                        "validates with the training prompts and reward", native, value)


def _tool_n1(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, args: dict[str, Any], training: bool) -> None:
    """toolcall_workflow: one reply per Tool-N1 row (raw_system, tools, conversations:
    data.prompt_format tool_n1), scored by Tool-N1's rule against the row's ``answer`` column (the
    tool_n1 scorer). The workflow scores inline: a reward function named for it is never called."""
    _, name_key, _, args_key = _reward_of(ctx, prefix, item)
    for read in (name_key, args_key):
        if read is not None:
            ctx.drop(read, f"{name} scores with Tool-N1's rule itself and calls no reward function")
    for arg, value in args.items():
        ctx.refuse(f"{prefix}.workflow_args.{arg}", f"{name} takes no workflow_args", None, value)
    for native, value, why in (("data.prompt_format", "tool_n1", "Tool-N1 rows: raw_system + tool instructions, then the conversations"),
                               ("data.response_key", "answer", "the calls the reply must make (the answer column)"),
                               (_NATIVE_REWARD, "tool_n1", "Tool-N1's reward: 1 for a well-formed reply with exactly the answer's calls")):
        _as_training(ctx, source, native, value, training, name, why)


def fixed_columns(ctx: Context, item: dict[str, Any]) -> bool:
    """Whether a taskset's workflow reads columns of its own, whatever its format keys name (Tool-N1's)."""
    name = item.get("default_workflow_type") or ctx.get(f"{_IN}.default_eval_workflow_type") or ctx.get(f"{_IN}.default_workflow_type")
    return name in TOOL_N1


def _distill_math(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, args: dict[str, Any], training: bool) -> None:
    """on_policy_distill_math_workflow: Qwen2.5-Math's prompt (its system message, and the
    boxed-answer instruction after the question: data.user_suffix), the teacher's log-probs at
    workflow_args.temperature (posttrain's teacher, the reference role, scores at the rollout
    temperature, so only that value is accepted), and a math score that is logged only: the
    distillation advantage reads no reward (on_policy_distill, jsd)."""
    _, name_key, _, args_key = _reward_of(ctx, prefix, item)
    for read in (name_key, args_key):
        if read is not None:
            ctx.drop(read, f"{name} scores with Qwen2.5-Math's answer check itself and calls no reward function")
    for arg, value in args.items():
        if arg != "temperature":
            ctx.refuse(f"{prefix}.workflow_args.{arg}", f"{name} reads the workflow_args ['temperature']", None, value)
    distilled = ctx.get("algorithm.advantage_fn") or ctx.get("algorithm.algorithm_type")
    if distilled not in ("on_policy_distill", "jsd"):  # then the score would train: it must be the source's
        ctx.refuse(source, f"{name} with advantage {distilled!r} trains on its score, Qwen2.5-Math's answer check, which posttrain "
                           "does not carry; with on_policy_distill or jsd the score is only logged", None, name)
        return
    teacher = args.get("temperature", 1.0)
    rollout = (ctx.get(f"{_IN}.taskset.rollout_args") or {}).get("temperature", ctx.get("model.temperature", 1.0))
    if training and teacher != rollout:  # validation computes no teacher log-probs
        ctx.refuse(f"{prefix}.workflow_args.temperature" if "temperature" in args else source,
                   f"the teacher scores at temperature {teacher}; posttrain's teacher (the reference role) scores the samples "
                   f"at the rollout temperature ({rollout}): set workflow_args.temperature to it", None, teacher)
    if "temperature" in args and (not training or teacher == rollout):
        ctx.drop(f"{prefix}.workflow_args.temperature", "the rollout temperature, at which posttrain's teacher scores the samples"
                 if training else "the teacher's temperature; validation computes no teacher log-probs")
    for native, value, why in (
            ("data.system_prompt", QWEN_MATH_SYSTEM_PROMPT, "Qwen2.5-Math's system message"),
            ("data.user_suffix", QWEN_MATH_USER_SUFFIX, "Qwen2.5-Math's instruction after the question"),
            (_NATIVE_REWARD, "math", "the accuracy it logs (the distillation advantage reads no reward): posttrain's math "
                                     "scorer (math-verify) stands in for Qwen2.5-Math's answer check, so the logged accuracy "
                                     "can differ where the two judge an answer differently")):
        _as_training(ctx, source, native, value, training, name, why)
