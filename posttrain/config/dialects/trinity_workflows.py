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
- **single turn with images**: ``simple_mm_workflow`` (and ``async_``): the row's images
  (``format.image_key``: data.image_key) go with its prompt to a vision-language policy, and the
  workflow's own system prompt (`MM_SYSTEM_PROMPT`, which replaces the taskset's) is data.system_prompt.
- **tool-using agent** (`rollout.multi_turn`, docs/agentic.md): posttrain's own name
  ``posttrain_tool_workflow``; its ``workflow_args`` are the ``rollout.multi_turn`` keys
  (tool_config_path, max_assistant_turns, ...).
- **multi-turn environment** (`env.*`): an agentic stage plays environments configured in
  ``env.custom_envs`` and ``env.train_env_manager`` rather than one episode per taskset row, so
  Trinity's environment workflows (frozen_lake_workflow, alfworld_workflow, ...) are refused with that
  pointer.

Every other workflow is refused naming what it needs. Trinity's registered reward functions
(``default_reward_fn_type`` of the taskset, else of ``buffer.explorer_input``) are posttrain's built-in
scorers of the same values (`REWARDS`), chosen by ``reward.custom_reward_function.name``; they take no
``reward_fn_args``. The others are refused with what they would need (`REFUSED_REWARDS`). Evaluation
tasksets are scored and prompted as the training taskset (posttrain validates with the stage's own
reward and data settings): a different reward or system prompt there is refused as a conflict.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.prompts import R1_SYSTEM_PROMPT
from posttrain.config.dialects.translate import Context

_IN = "buffer.explorer_input"
SINGLE_TURN = ("simple_workflow", "async_simple_workflow")
MATH = ("math_workflow", "async_math_workflow")
TOOLS = "posttrain_tool_workflow"
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
    **{name: _ENV for name in ("frozen_lake_workflow", "alfworld_workflow", "sciworld_workflow", "webshop_workflow",
                               "step_wise_alfworld_workflow", "RAFT_alfworld_workflow", "RAFT_reflect_alfworld_workflow",
                               "sudoku_workflow", "email_search_workflow")},
    "toolcall_workflow": "Trinity's Tool-N1 workflow grades one tool-call reply against the row's answer with its own prompt; "
                         f"posttrain's tool calling runs the tools over several turns ({TOOLS}, rollout.multi_turn)",
    "tool_call_workflow": f"as toolcall_workflow: one graded tool-call reply; posttrain runs the tools ({TOOLS}, rollout.multi_turn)",
    **{name: "needs an LLM judge over an OpenAI-compatible server (explorer.auxiliary_models); a per-response judge is "
             "reward.workers.<name>.worker_cls: llm_judge"
       for name in ("math_ruler_workflow", "async_math_ruler_workflow", "math_trainable_ruler_workflow", "rubric_judge_workflow")},
    **{name: "needs a reward model scoring inside the workflow; use reward.reward_model (or reward.workers) with simple_workflow"
       for name in ("math_rm_workflow", "async_math_rm_workflow")},
    **{name: "boxed-answer prompting and scoring with Trinity-RFT's answer cleaning: use simple_workflow with posttrain's math "
             "scorer (reward.custom_reward_function.name: math) and your own format.system_prompt"
       for name in ("math_boxed_workflow", "async_math_boxed_workflow", "math_eval_workflow", "async_math_eval_workflow")},
}
# Trinity-RFT's registered reward functions -> the posttrain built-in scorer giving the same scores
# (posttrain.rewards.scorers.BUILTIN_SCORERS), and those refused with what they would need.
REWARDS = {"math_reward": "think_answer", "countdown_reward": "countdown_equation"}
_NATIVE_REWARD = "reward.custom_reward_function.name"
_MATH_NATIVE = "posttrain's math scorer (reward.custom_reward_function.name: math) compares the boxed answer symbolically with math-verify"
REFUSED_REWARDS = {
    "math_boxed_reward": "compares the last \\boxed{} answer with the truth as strings after Trinity-RFT's answer cleaning "
                         "(Qwen2.5-Math's evaluation normalisation, with its list of unit words and word-to-number conversion), "
                         f"which posttrain does not carry; {_MATH_NATIVE}",
    "math_dapo_reward": f"DAPO's math scoring with Trinity-RFT's answer normalisation, which posttrain does not carry; {_MATH_NATIVE}, "
                        "and reward.overlong_buffer is DAPO's overlong penalty",
    "accuracy_reward": f"math-verify with Trinity-RFT's own extraction settings (boxed answers first, no format part); {_MATH_NATIVE}",
    "format_reward": "a format check alone; posttrain's think_answer scorer (reward.custom_reward_function.name: think_answer) adds "
                     "the same +-0.1 format part to the answer's accuracy",
    "rm_gallery_reward": "calls the RM-Gallery package's reward models, which posttrain does not run; a reward model is "
                         "reward.reward_model, a per-response judge reward.workers.<name>.worker_cls: llm_judge",
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
            _one(ctx, f"{_IN}.eval_tasksets[{i}]", item, default_eval or default, key, training=False)
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
    if name is None and workflow in MATH:
        name = "math_reward"  # math_workflow's own default
    if name is None:
        return None
    where = key or source
    why = "" if key else f"{workflow}'s default reward function"
    if name in REWARDS:
        ctx.set(_NATIVE_REWARD, REWARDS[name], where, why or f"Trinity-RFT's {name}: the built-in scorer of the same scores")
        if args_key is not None:
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


def _one(ctx: Context, prefix: str, item: dict[str, Any], inherited: Any, inherited_key: str, training: bool) -> None:
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
    elif name in MM:
        _reward(ctx, prefix, item, name, source)
        ctx.set("data.system_prompt", MM_SYSTEM_PROMPT, source, f"{name}: the single-turn rollout with the row's images "
                "(data.image_key) and the workflow's own system prompt (dialects.trinity_workflows.MM_SYSTEM_PROMPT)")
        _no_args(ctx, prefix, args, name)
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
        reason = REFUSED.get(name, f"unknown to posttrain; the workflows it translates are {list(SINGLE_TURN + MATH + MM) + [TOOLS]}")
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


def _no_args(ctx: Context, prefix: str, args: dict[str, Any], name: Any) -> None:
    for arg, value in args.items():
        ctx.refuse(f"{prefix}.workflow_args.{arg}", f"the single-turn rollout ({name or 'default'}) takes no workflow_args", None, value)
