"""Trinity-RFT workflows: which of posttrain's rollout paths a taskset's workflow stands for.

In Trinity-RFT a taskset names a workflow (``default_workflow_type``, else
``buffer.explorer_input.default_workflow_type``; evaluation tasksets fall back to
``default_eval_workflow_type``) that turns each task into experiences. posttrain has three rollout
paths, chosen by the native config rather than by a class per task:

- **single turn** (one response per prompt, scored by the reward function): Trinity's
  ``simple_workflow`` and ``math_workflow`` (and their ``async_`` twins). ``math_workflow`` adds
  Trinity's R1-style system prompt when the taskset gives none and scores with its math reward; it is
  translated only when the taskset's ``format.system_prompt`` is set (the prompt then is the user's).
- **tool-using agent** (`rollout.multi_turn`, docs/agentic.md): posttrain's own name
  ``posttrain_tool_workflow``; its ``workflow_args`` are the ``rollout.multi_turn`` keys
  (tool_config_path, max_assistant_turns, ...).
- **multi-turn environment** (`env.*`): an agentic stage plays environments configured in
  ``env.custom_envs`` and ``env.train_env_manager`` rather than one episode per taskset row, so
  Trinity's environment workflows (frozen_lake_workflow, alfworld_workflow, ...) are refused with that
  pointer.

Every other workflow is refused naming what it needs. Trinity's reward-function classes
(``default_reward_fn_type``, ``reward_fn_args``) are refused: posttrain scores with
``reward.custom_reward_function`` or ``reward.workers`` (built-in math, tasks, code, ... scorers).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.sections.buffer import REWARD_FN_REASON

_IN = "buffer.explorer_input"
SINGLE_TURN = ("simple_workflow", "async_simple_workflow")
MATH = ("math_workflow", "async_math_workflow")
TOOLS = "posttrain_tool_workflow"
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
    **{name: "boxed-answer prompting and scoring: use simple_workflow with the math scorer (reward.workers.<name>.worker_cls: math) "
             "and your own format.system_prompt"
       for name in ("math_boxed_workflow", "async_math_boxed_workflow", "math_eval_workflow", "async_math_eval_workflow")},
}


def workflows(ctx: Context) -> None:
    """Translate or refuse the workflow, workflow_args and reward-function keys of every taskset."""
    default = _take(ctx, f"{_IN}.default_workflow_type")
    default_eval = _take(ctx, f"{_IN}.default_eval_workflow_type")
    _reward_fn(ctx, _IN)
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


def _take(ctx: Context, key: str) -> Any:
    if ctx.has(key):
        ctx.consume(key)
    return ctx.get(key)


def _reward_fn(ctx: Context, prefix: str) -> None:
    for name in ("default_reward_fn_type", "reward_fn_args"):
        key = f"{prefix}.{name}"
        value = _take(ctx, key)
        if value in (None, {}, ""):
            continue
        ctx.refuse(key, REWARD_FN_REASON, None, value)


def _one(ctx: Context, prefix: str, item: dict[str, Any], inherited: Any, inherited_key: str, training: bool) -> None:
    """One taskset's workflow (its own, else the inherited default) and its workflow_args."""
    key = f"{prefix}.default_workflow_type"
    own = _take(ctx, key)
    name = own if own is not None else inherited
    source = key if own is not None else inherited_key
    args = _take(ctx, f"{prefix}.workflow_args") or {}
    _reward_fn(ctx, prefix)
    if name is None or name in SINGLE_TURN:
        if name is not None:
            ctx.drop(source, "posttrain's single-turn rollout: one response per prompt, scored by the reward function")
        _no_args(ctx, prefix, args, name)
    elif name in MATH:
        if (item.get("format") or {}).get("system_prompt") is None:
            ctx.refuse(source, f"{name} adds Trinity's R1 system prompt (think/answer tags) when the taskset has none; set "
                               f"{prefix}.format.system_prompt to the prompt you want (then it is the single-turn rollout)", None, name)
        else:
            ctx.drop(source, "posttrain's single-turn rollout, with the taskset's format.system_prompt")
        _no_args(ctx, prefix, args, name)
    elif name == TOOLS:
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
        reason = REFUSED.get(name, f"unknown to posttrain; the workflows it translates are {list(SINGLE_TURN + MATH) + [TOOLS]}")
        ctx.refuse(source, f"workflow {name!r}: {reason}", None, name)


def _no_args(ctx: Context, prefix: str, args: dict[str, Any], name: Any) -> None:
    for arg, value in args.items():
        ctx.refuse(f"{prefix}.workflow_args.{arg}", f"the single-turn rollout ({name or 'default'}) takes no workflow_args", None, value)
