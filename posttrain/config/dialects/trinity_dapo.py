"""Trinity-RFT's DAPO math reward and the BOTS math workflows, onto posttrain's ``dapo_math`` and
``bots_math`` scorers (posttrain.rewards.dapo_math: Reasoning360's naive DAPO grader).

- ``math_dapo_reward``'s ``reward_fn_args`` are DAPO's overlong penalty
  (trinity/common/rewards/dapo_reward.py): 0 below ``max_response_length - cache_length`` tokens,
  then a linear ramp to ``-penalty_factor`` at ``max_response_length``, held there beyond it. That is
  ``reward.overlong_buffer`` (len: cache_length, max_resp_len: max_response_length) while no response
  passes max_response_length; posttrain's ramp goes on below -penalty_factor past it, so a
  max_response_length under the generation limit is refused. An evaluation taskset's own arguments
  (Trinity-RFT does not inherit the training ones) may turn the penalty off, or on alone with one
  ramp: data.val_file_settings.<file>.overlong_penalty of its files.
- ``examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow``: math_boxed_workflow
  that sends the prompt column's chat messages as they are (no system prompt, no reply prefix) and
  scores with BOTS's own reward, whatever the taskset names: the ``bots_math`` scorer, its
  ``with_think``/``format_score_coef`` workflow_args its format part. ``use_base`` makes Trinity-RFT
  join a message list into text, which fails there, and is refused. The reference-collection twin
  (``REF_EVAL``) also appends every task's rewards to the file ``BOTS_REF_EVAL_LOG_FILE`` names:
  ``explorer.task_rewards_file`` (posttrain.trainer.task_log).
"""

from __future__ import annotations

import os
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_eval import own_setting

# BOTS's reference-collection twin: its example names it bots_ref_eval_collect_math_boxed_workflow (a name
# its plugin file does not register), the class path is the other way Trinity-RFT finds it
REF_EVAL = ("bots_ref_eval_collect_math_boxed_workflow",
            "examples.bots.workflow.bots_math_boxed_workflow.BOTSRefEvalCollectMathBoxedWorkflow")
BOTS = ("examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow", *REF_EVAL)
# the file the twin appends to: this environment variable, else Trinity-RFT's default, in the working directory
LOG_ENV, LOG_DEFAULT = "BOTS_REF_EVAL_LOG_FILE", "./bots_ref_eval_log.jsonl"
DAPO_ARGS = {"enable_overlong_penalty": "enable", "cache_length": "len", "penalty_factor": "penalty_factor",
             "max_response_length": "max_resp_len"}
_IN = "buffer.explorer_input"
_KWARGS = "reward.custom_reward_function.reward_kwargs"


def dapo_overlong(ctx: Context, args: dict[str, Any], key: str, training: bool,
                  taskset: tuple[str, dict[str, Any]] | None = None) -> None:
    """math_dapo_reward's ``reward_fn_args`` (at ``key``) as reward.overlong_buffer (module docstring);
    ``taskset``: (prefix, item) of an evaluation taskset, whose penalty may differ (`_eval_overlong`)."""
    for arg in args:
        if arg not in DAPO_ARGS:
            ctx.refuse(f"{key}.{arg}", f"math_dapo_reward takes the arguments {list(DAPO_ARGS)} (Trinity-RFT fails on others)", None, args[arg])
    on = bool(args.get("enable_overlong_penalty"))
    if not training:
        _eval_overlong(ctx, args, key, on, taskset)
        return
    if not on:
        if args:
            ctx.drop(key, "enable_overlong_penalty off: math_dapo_reward's other arguments change nothing")
        return
    if _ramp_ok(ctx, args, key):
        for arg, native in DAPO_ARGS.items():
            ctx.set(f"reward.overlong_buffer.{native}", True if arg == "enable_overlong_penalty" else args[arg], f"{key}.{arg}",
                    "math_dapo_reward's overlong penalty (DAPO's soft overlong punishment)")


def _ramp_ok(ctx: Context, args: dict[str, Any], key: str) -> bool:
    """Whether the penalty's arguments are what Trinity-RFT asserts and reward.overlong_buffer's
    ramp gives the same penalties (else the key is refused, saying why)."""
    limit = (ctx.get(f"{_IN}.taskset.rollout_args") or {}).get("max_tokens") or ctx.get("model.max_response_tokens")
    length, cache, factor = (args.get(a) for a in ("max_response_length", "cache_length", "penalty_factor"))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (length, cache, factor))
    if not numbers or not 1 <= cache < length or factor < 0:
        ctx.refuse(key, "enable_overlong_penalty needs max_response_length, cache_length (1 or more, below "
                        "max_response_length) and penalty_factor (0 or more), as Trinity-RFT asserts", "reward.overlong_buffer", args)
        return False
    if isinstance(limit, int) and length < limit:
        ctx.refuse(f"{key}.max_response_length", f"below the generation limit ({limit} tokens): past max_response_length "
                   "Trinity-RFT's penalty stays at -penalty_factor while reward.overlong_buffer's ramp goes on down; "
                   f"set it to {limit}", "reward.overlong_buffer.max_resp_len", length)
        return False
    return True


_RAMP = {"cache_length": "len", "penalty_factor": "penalty_factor", "max_response_length": "max_resp_len"}


def _eval_overlong(ctx: Context, args: dict[str, Any], key: str, on: bool, taskset: tuple[str, dict[str, Any]] | None) -> None:
    """An evaluation taskset's penalty. Trinity-RFT does not inherit the training taskset's
    reward_fn_args, so it may be off where training has it, or on alone: that taskset's files get
    data.val_file_settings.<file>.overlong_penalty. posttrain has one ramp (reward.overlong_buffer),
    so a penalty on in both must have the same cache_length, penalty_factor and max_response_length."""
    trained_on = bool(ctx.native_get("reward.overlong_buffer.enable"))
    ramp = {native: ctx.native_get(f"reward.overlong_buffer.{native}") for native in _RAMP.values()}
    wanted = {native: args.get(arg) for arg, native in _RAMP.items()}
    if on == trained_on and (not on or ramp == wanted):
        if args:
            ctx.drop(key, "as the training taskset's penalty" + ("" if on else " (none)") + ": the training reward, which validation uses")
        return
    if on and any(v is not None for v in ramp.values()) and ramp != wanted:
        ctx.refuse(key, "the evaluation taskset's overlong penalty ramp differs from the training taskset's (or another "
                        f"evaluation taskset's) {ramp}; posttrain has one ramp (reward.overlong_buffer): give it the same "
                        "cache_length, penalty_factor and max_response_length", None, args)
        return
    if on and not _ramp_ok(ctx, args, key):
        return
    prefix, item = taskset if taskset is not None else ("", {})
    why = ("math_dapo_reward's overlong penalty on in this evaluation taskset only" if on else
           "no overlong penalty in this evaluation taskset (its own reward_fn_args), while the training taskset's has one")
    if not own_setting(ctx, prefix, item, "overlong_penalty", on, key, why):
        ctx.refuse(key, "the evaluation taskset's math_dapo_reward overlong penalty differs from the training taskset's, and "
                        "its files are not known (its path is refused): posttrain sets it per validation file", None, args)
        return
    if on and all(v is None for v in ramp.values()):
        for arg, native in _RAMP.items():
            ctx.set(f"reward.overlong_buffer.{native}", args[arg], f"{key}.{arg}",
                    "the ramp of the evaluation taskset's penalty (reward.overlong_buffer.enable stays off for training scores)")


def bots_workflow(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, args: dict[str, Any],
                  training: bool, reward_keys: tuple[str | None, str | None]) -> None:
    """BOTS's math workflow (module docstring); ``reward_keys``: the keys naming the taskset's
    reward function and its arguments, which BOTS replaces with its own."""
    ctx.set("reward.custom_reward_function.name", "bots_math", source, f"{name} scores with BOTS's reward (the bots_math scorer)")
    if name in REF_EVAL:
        _ref_eval_log(ctx, name, source, training)
    for read in reward_keys:
        if read is not None:
            ctx.drop(read, f"{name} scores with BOTS's own reward (bots_math), which takes no arguments, whatever the taskset names")
    fmt = item.get("format") or {}
    for field in ("system_prompt", "reply_prefix"):
        if fmt.get(field) is not None:
            ctx.refuse(f"{prefix}.format.{field}", f"{name} sends the prompt column's messages as they are and leaves "
                       f"format.{field} out, which posttrain would send: unset it", None, fmt[field])
    for arg, value in args.items():
        where = f"{prefix}.workflow_args.{arg}"
        if arg == "use_base" and value:
            ctx.refuse(where, f"{name} with use_base joins the prompt column's message list into text, which fails in Trinity-RFT; "
                              "leave use_base off", None, value)
        elif arg in ("with_think", "format_score_coef"):
            _bots_format(ctx, where, arg, value, bool(args.get("with_think")), training)
        elif arg != "use_base":
            ctx.refuse(where, f"{name} reads the workflow_args use_base, with_think, format_score_coef", None, value)
        else:
            ctx.drop(where, "off: the chat messages as they are")
    if not training and bool(ctx.native_get(f"{_KWARGS}.with_think")) and "with_think" not in args:
        ctx.refuse(source, "the evaluation taskset has no with_think format penalty while the training taskset's has; "
                           "posttrain validates with the training reward", None, name)


def _bots_format(ctx: Context, where: str, arg: str, value: Any, think: bool, training: bool) -> None:
    """with_think / format_score_coef as bots_math's reward_kwargs (the size only with with_think on)."""
    native = f"{_KWARGS}.{arg}"
    wanted = (bool(value) or None) if arg == "with_think" else (value if think and value != 0.1 else None)
    if training:
        if wanted is not None:
            ctx.set(native, wanted, where, "BOTS's think-tag format penalty (bots_math)")
        else:
            ctx.drop(where, "Trinity-RFT's default, or no penalty with with_think off")
    elif ctx.native_get(native) == wanted:
        ctx.drop(where, "as the training taskset: posttrain validates with the training reward")
    else:
        ctx.refuse(where, f"the evaluation taskset's {arg} differs from the training taskset's: posttrain validates with "
                          "the training reward", native, value)


def _ref_eval_log(ctx: Context, name: str, source: str, training: bool) -> None:
    """The reference-collection twin appends each task's rewards to the file BOTS_REF_EVAL_LOG_FILE
    names (read when the file is translated, in the environment of the run, as the workflow reads it
    when it runs), else ./bots_ref_eval_log.jsonl: explorer.task_rewards_file writes the same lines
    for the explored tasks. posttrain's validation writes none, so an evaluation taskset is refused."""
    if not training:
        ctx.refuse(source, f"{name} in an evaluation taskset would log the evaluation tasks' rewards too; posttrain logs "
                           "the explored (training) tasks only (explorer.task_rewards_file): evaluate with BOTSMathBoxedWorkflow", None, name)
        return
    path = os.environ.get(LOG_ENV, LOG_DEFAULT)
    ctx.set("explorer.task_rewards_file", path, source,
            f"{name} appends every task's rewards, question and truth to {LOG_ENV} "
            + ("(set here)" if LOG_ENV in os.environ else f"(unset: {LOG_DEFAULT}, Trinity-RFT's default)"))
