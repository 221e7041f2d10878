"""Trinity-RFT's ``learn_to_ask`` example workflow onto a single-turn stage with posttrain's learn-to-ask reward.

The example's ``examples.learn_to_ask.workflow.workflow_learn2ask.Learn2AskWorkflow`` samples
``repeat_times`` responses to each conversation (its taskset's ``format.prompt_key`` column, a list
of messages) after a system prompt of its own, and rewards each with rules and a judge served as the
first of ``explorer.auxiliary_models`` (posttrain.rewards.learn2ask). posttrain runs it as:

- ``data.system_prompt``: the example's instructions in posttrain's words (`POLICY_PROMPT`; with
  ``workflow_args.train_mode: Ra`` the version without the ``<stop />`` rule), put before each
  conversation;
- ``reward.workers.judge``: worker_cls ``posttrain.rewards.learn2ask:Learn2AskReward`` with
  ``train_mode`` and ``fusion_mode`` from workflow_args, the judge ``reward.auxiliary_models.judge``
  and its reply budget (the auxiliary model's max_response_tokens), reading the conversation,
  ``decision_truth`` and ``info_truth`` columns from each row's extra_info (``data.extra_info_keys``);
- the rollout model's ``enable_openai_api`` is dropped: the workflow calls the policy directly and
  reaches only its judge over HTTP (which posttrain serves).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context

NAME = "examples.learn_to_ask.workflow.workflow_learn2ask.Learn2AskWorkflow"
WORKER = "posttrain.rewards.learn2ask:Learn2AskReward"
STOP = "<stop />"
# The policy's instructions (the example's two system prompts, in posttrain's words): one short
# question with two or three choices, no repeats, and (except in train_mode Ra) <stop /> when done.
ASK = ("You are a medical assistant. Read the conversation so far and continue the medical inquiry in English.\n\n"
       "- Ask exactly one clear, short medical question that offers two or three answer choices.\n"
       "- Never repeat a question that was already asked.\n"
       "- Write a single sentence.")
POLICY_PROMPT = ASK + f"\n- Once you know enough to suggest a medication, answer only: {STOP}"
TRAIN_MODES = ("Ra+Rs", "Ra", "Rs")  # posttrain.rewards.learn2ask.TRAIN_MODES (the config layer cannot import it)


def learn2ask_workflow(ctx: Context, prefix: str, item: dict[str, Any], source: str, worker: str, kwargs: dict[str, Any]) -> None:
    """The training taskset's learn-to-ask settings (module docstring); `kwargs` holds the judge's
    model and reply budget already."""
    args = dict(item.get("workflow_args") or {})
    mode, fusion = args.pop("train_mode", "Ra+Rs"), args.pop("fusion_mode", "default")
    if mode not in TRAIN_MODES:
        ctx.refuse(f"{prefix}.workflow_args.train_mode", f"the learn-to-ask workflow knows train_mode {', '.join(TRAIN_MODES)}", None, mode)
        return
    column = (item.get("format") or {}).get("prompt_key") or "prompt"  # Trinity-RFT's FormatConfig default
    ctx.set(f"{worker}.worker_cls", WORKER, source, "the learn-to-ask reward: the decision, then the judge's format and content scores")
    kwargs.update(train_mode=mode, fusion_mode=fusion, messages_key=column)
    ctx.set("data.extra_info_keys", [column, "decision_truth", "info_truth"], source,
            "the reward reads each row's conversation, its decision_truth and its info_truth")
    if (item.get("format") or {}).get("system_prompt") is None:
        ctx.set("data.system_prompt", ASK if mode == "Ra" else POLICY_PROMPT, source,
                "the workflow's system prompt (posttrain's words for the example's instructions)")
    for arg, value in args.items():
        ctx.refuse(f"{prefix}.workflow_args.{arg}", "the learn-to-ask workflow reads only train_mode and fusion_mode", None, value)
    for key in ("default_reward_fn_type", "reward_fn_args"):
        ctx.consume(f"{prefix}.{key}")
        if item.get(key):
            ctx.drop(f"{prefix}.{key}", "the learn-to-ask workflow rewards with its own rules and judge")
    openai = "explorer.rollout_model.enable_openai_api"
    if ctx.has(openai) and openai not in ctx.handled:
        ctx.consume(openai)
        ctx.drop(openai, "the learn-to-ask workflow calls the policy directly; only its judge (an auxiliary model) is reached over HTTP")
