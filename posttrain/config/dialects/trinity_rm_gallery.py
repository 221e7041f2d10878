"""Trinity-RFT's ``math_rm_workflow`` with ``rm_gallery_reward``: RM-Gallery's reward as a posttrain scorer.

Trinity-RFT's MathRMWorkflow (and ``async_math_rm_workflow``) is the single-turn rollout of
simple_workflow: the taskset's ``format.system_prompt`` if any, the question as the user turn,
``format.reply_prefix`` as the open assistant turn, and no prompt of its own. Its reward call differs:
it passes the response object, the chat messages and ``ground_truth=`` (the row's ``response_key``
column), which only ``rm_gallery_reward`` takes (Trinity-RFT's other reward functions fail on it, and
with none named the workflow fails to start). That function builds the RM-Gallery reward named by
``reward_fn_args.reward_name``, with the other ``reward_fn_args`` as its fields, scores the response
text against the reference, and the experience's reward is the sum of the dimensions it reports.

posttrain translates ``reward_name: math_verify_reward`` (RM-Gallery's one dimension ``math_verify``,
1 or 0) onto the ``math_verify_first`` scorer, which gives the same scores (posttrain.rewards.math_verify_first,
which also says where Trinity-RFT's runtime gives others). Its fields:

- ``name``: the name the score is reported under: the scorer's ``reward_kwargs.name``
  (``reward/<name>``), left out at its default ``math_verify``;
- ``timeout_score``: the score of a call math-verify raises out of. That happens only where its
  signal-based time limits cannot be set (off the main thread, as in Trinity-RFT's Ray actors, where it
  is every call), never in posttrain's scorer: its default 0.0 is dropped, another value refused;
- ``max_workers``: the size of a thread pool Trinity-RFT never passes (one response per call): dropped;
- anything else: RM-Gallery's rewards are pydantic models that ignore unknown fields: dropped.

Other reward names (RM-Gallery's model-based and rubric rewards, its other rule rewards) are refused
naming the one translated.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context

RM_WORKFLOWS = ("math_rm_workflow", "async_math_rm_workflow")
# RM-Gallery's registered reward name -> the posttrain built-in scorer of the same scores
RM_GALLERY = {"math_verify_reward": "math_verify_first"}
_NATIVE, _KWARGS = "reward.custom_reward_function.name", "reward.custom_reward_function.reward_kwargs"
_METRIC = "math_verify"  # MathVerifyReward's default `name`
_IGNORED = "RM-Gallery's rewards are pydantic models that ignore fields they do not have, so it changes nothing in Trinity-RFT either"


def rm_workflow(ctx: Context, prefix: str, name: str, source: str, args: dict[str, Any], training: bool,
                reward: tuple[Any, str | None, dict[str, Any], str | None]) -> None:
    """One taskset whose workflow is math_rm_workflow; ``reward``: (function, its key, reward_fn_args,
    their key) as trinity_workflows._reward_of reads them."""
    for arg in args:
        ctx.drop(f"{prefix}.workflow_args.{arg}", f"{name} reads no workflow_args, so it changes nothing in Trinity-RFT either")
    function, function_key, fn_args, args_key = reward
    if function_key is not None:  # else a missing reward function is refused at the workflow's key
        ctx.drop(source, f"{name}: posttrain's single-turn rollout (simple_workflow's messages), scored by the reward function")
    if function != "rm_gallery_reward":
        what = f"with {function!r}" if function is not None else "without one (no default_reward_fn_type)"
        ctx.refuse(function_key or source, f"{name} calls its reward function with the response object, the chat messages and "
                                           f"ground_truth=, a call only rm_gallery_reward takes: Trinity-RFT fails {what}", _NATIVE, function)
        if args_key is not None:
            ctx.drop(args_key, f"the arguments of {function!r}, which is refused")
        return
    if not isinstance(fn_args, dict):
        ctx.refuse(args_key or function_key, "rm_gallery_reward's reward_fn_args are a mapping: reward_name and the reward's fields", None, fn_args)
        return
    reward_name = fn_args.get("reward_name")
    if not isinstance(reward_name, str) or reward_name not in RM_GALLERY:
        where = f"{args_key}.reward_name" if "reward_name" in fn_args else function_key
        ctx.refuse(where, f"RM-Gallery reward {reward_name!r}: posttrain translates {list(RM_GALLERY)} (a reward model is "
                          "reward.reward_model, an LLM judge reward.workers.<name>.worker_cls: llm_judge)", _NATIVE, reward_name)
        return
    ctx.set(_NATIVE, RM_GALLERY[reward_name], function_key,
            f"RM-Gallery's {reward_name}: the first expression math-verify reads in the whole response against the reference's "
            "(posttrain.rewards.math_verify_first; where Trinity-RFT runs it off the main thread, math-verify's time limits fail "
            "and RM-Gallery scores timeout_score instead)")
    ctx.drop(f"{args_key}.reward_name", "read with default_reward_fn_type: which RM-Gallery reward scores")
    for arg, value in fn_args.items():
        if arg != "reward_name":
            _field(ctx, f"{args_key}.{arg}", arg, value, training)


def _field(ctx: Context, key: str, arg: str, value: Any, training: bool) -> None:
    """One field of RM-Gallery's MathVerifyReward given in reward_fn_args."""
    if arg == "name":
        if not isinstance(value, str) or not value:
            ctx.refuse(key, "the name MathVerifyReward reports its score under: a non-empty string", None, value)
        elif training:
            if value != _METRIC:
                ctx.set(f"{_KWARGS}.name", value, key, "the name the score is logged under (reward/<name>)")
            else:
                ctx.drop(key, f"its default: the score is logged as reward/{_METRIC}")
        elif ctx.native_get(f"{_KWARGS}.name", _METRIC) == value:
            ctx.drop(key, "as the training taskset: posttrain validates with the training reward")
        else:
            ctx.refuse(key, "the evaluation taskset's score name differs from the training taskset's: posttrain validates "
                            "with the training reward", f"{_KWARGS}.name", value)
    elif arg == "timeout_score":
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
            ctx.drop(key, "its default: the score of a call math-verify raises out of, which posttrain's scorer never meets")
        else:
            ctx.refuse(key, "the score RM-Gallery gives a call math-verify raises out of: where its signal-based time limits "
                            "cannot be set (off the main thread, as in Trinity-RFT's Ray actors) every call, else none; "
                            "posttrain's scorer runs math-verify without them and meets no such call: remove it or set 0.0",
                       None, value)
    elif arg == "max_workers":
        ctx.drop(key, "the thread pool of RM-Gallery's batch scoring; Trinity-RFT scores one response per call without one")
    else:
        ctx.drop(key, f"math_verify_reward has no field {arg!r}; {_IGNORED}")
