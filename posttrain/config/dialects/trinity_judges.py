"""Trinity-RFT's judge workflows onto posttrain's chat judges over an auxiliary model.

Trinity-RFT serves each of ``explorer.auxiliary_models`` behind a vLLM OpenAI-compatible server and
hands the workflows OpenAI clients; its judge workflows call the first one:

- ``math_ruler_workflow`` / ``async_math_ruler_workflow``: one request per task shows the judge the
  question (with the <think>/<answer> format the policy was asked for) and the task's whole group of
  responses; the reply's last ``[...]`` list gives each response a score in [0, 1] (clipped), which
  is its reward; a missing or malformed list, or one of the wrong length, scores the whole group 0.
  ``math_reward`` (posttrain: think_answer) is computed only as a metric (gold_reward); the policy
  gets the R1 system prompt, as math_workflow does. The request sets no sampling: the server's
  default, which for the judge is its max_response_tokens and otherwise the model's own
  generation_config. posttrain: reward.workers.judge with worker_cls ruler_judge (temperature 1, the
  OpenAI default, since posttrain's endpoint does not read generation_config), and a weight-0
  think_answer worker named gold whose mean is logged as reward/gold/mean.
- ``rubric_judge_workflow``: one greedy request per response with the question, the response and
  the row's ``rubric`` (``{description, weight}`` items); a 1-10 rating becomes rating / 10, and an
  answer without a rating in range scores 0. posttrain: worker_cls rubric_judge, temperature 0,
  with each row's rubric column copied into its extra_info (data.extra_info_keys).

- the ``learn_to_ask`` example's ``Learn2AskWorkflow``: its rules and judge as the reward worker
  posttrain.rewards.learn2ask (posttrain.config.dialects.trinity_learn2ask).

Both judges' prompts are posttrain's own (posttrain.rewards.chat_judges), not Trinity-RFT's text.
The auxiliary model becomes ``reward.auxiliary_models.judge`` (`auxiliary_model`). The workers
claim the tag "" (rows without a data_source column; a file whose rows name data sources is
refused before training, naming the tag). ``math_trainable_ruler_workflow`` (the policy judges its own
group) is not a reward worker: reward.self_judge (posttrain.config.dialects.trinity_workflows). ``math_rm_workflow``
calls no auxiliary model: its RM-Gallery reward is a scorer (posttrain.config.dialects.trinity_rm_gallery).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.prompts import R1_SYSTEM_PROMPT
from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_learn2ask import NAME as LEARN2ASK, learn2ask_workflow

RULER = ("math_ruler_workflow", "async_math_ruler_workflow")
RUBRIC = ("rubric_judge_workflow",)
# The policy judges its own groups and trains on its verdicts where the gold reward counts: reward.self_judge
# (translated in posttrain.config.dialects.trinity_workflows; its batch sizes in trinity_batches).
SELF_JUDGE = "math_trainable_ruler_workflow"
SELF_JUDGE_GOLD_PROBABILITY = 0.2  # the workflow's share of tasks whose ground truth training may use
SELF_JUDGE_GOLD_RANGE = [-0.1, 1.1]  # the workflow maps every gold reward from this range onto [0, 1]
JUDGE_WORKFLOWS = RULER + RUBRIC + (LEARN2ASK,)  # the learn_to_ask example's: posttrain.config.dialects.trinity_learn2ask
_IN, _AUX = "buffer.explorer_input", "explorer.auxiliary_models"
# the opening of the R1 template: Trinity-RFT's rubric workflow's system prompt (with its trailing
# newline and indentation), the R1 template without the tag instructions
RUBRIC_SYSTEM_PROMPT = R1_SYSTEM_PROMPT.split(" The reasoning process and answer")[0] + "\n    "
RULER_FORMAT = ("The answers were asked to reason inside <think> </think> tags first and then give the final "
                "answer inside <answer> </answer> tags.")
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "auto": "auto", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
_ENGINE = {"tensor_parallel_size": "tensor_model_parallel_size", "gpu_memory_utilization": "gpu_memory_utilization",
           "enforce_eager": "enforce_eager", "max_model_len": "max_model_len"}
_DEFAULTS = {"gpu_memory_utilization": 0.9, "enforce_eager": False}  # Trinity-RFT's, where posttrain's differ
_VLLM_KWARGS = ("enable_prefix_caching", "enable_chunked_prefill")
_INERT = {
    "name": "a display name", "use_v1": "vLLM's V1 engine, which posttrain's vllm engine uses",
    "trust_remote_code": "posttrain loads the judge's code as its tokenizer and config say",
    "enable_openai_api": "an auxiliary model is always served (Trinity-RFT turns it on too)",
    "enable_history": "Trinity-RFT turns it off for auxiliary models",
    "seed": "the seed of the judge's sampling: posttrain seeds the engine with trainer.seed, which draws other samples from the same distribution",
    "max_prompt_tokens": "posttrain's endpoint does not truncate a judge's prompt (engine.max_model_len bounds prompt and reply)",
}


def training_workflow(ctx: Context) -> Any:
    """The training taskset's workflow (its own, else buffer.explorer_input's default)."""
    own = (ctx.get(f"{_IN}.taskset") or {}).get("default_workflow_type") if isinstance(ctx.get(f"{_IN}.taskset"), dict) else None
    return own if own is not None else ctx.get(f"{_IN}.default_workflow_type")


def judge_workflow(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, training: bool,
                   rewards: dict[str, str]) -> None:
    """One taskset whose workflow is a judge workflow: the auxiliary model, the judge worker and the
    policy's prompt; an evaluation taskset is judged by the training taskset's judge. ``rewards``:
    Trinity-RFT reward function -> posttrain scorer (trinity_workflows.REWARDS)."""
    if not training:
        ctx.consume(f"{prefix}.default_reward_fn_type", f"{prefix}.reward_fn_args")
        if name == training_workflow(ctx):
            ctx.drop(source, f"validation is scored by the training stage's reward workers: the same {name} judge")
        else:
            ctx.refuse(source, f"an evaluation taskset judged by {name} while the training taskset runs {training_workflow(ctx)!r}: "
                               "posttrain validates with the training stage's reward", None, name)
        return
    models = judge_models(ctx, source, name)
    if models is None:
        return
    worker, kwargs = "reward.workers.judge", {"model": "judge", "max_tokens": max_tokens(ctx, models[0])}
    system = (item.get("format") or {}).get("system_prompt")
    if name == LEARN2ASK:
        learn2ask_workflow(ctx, prefix, item, source, worker, kwargs)
        why = "the judge's request: the example sets no sampling (temperature 1, the OpenAI default) and reads at most max_tokens"
        ctx.set(f"{worker}.tag_included", [""], source, "every row without a data_source column (Trinity-RFT judges every task of the taskset)")
        ctx.set(f"{worker}.reward_kwargs", kwargs, source, why)
        return
    if name in RULER:
        ctx.set(f"{worker}.worker_cls", "ruler_judge", source, "RULER: the judge scores a task's group of responses together in [0, 1]")
        kwargs.update(temperature=1.0, instructions=RULER_FORMAT)
        why = ("the judge's request: Trinity-RFT sets no sampling (the server's default: max_response_tokens and the model's "
               "generation_config; posttrain's endpoint samples at temperature 1 unless told), and tells the judge the answer format")
        _gold(ctx, prefix, item, source, rewards)
        if system is None:
            ctx.set("data.system_prompt", R1_SYSTEM_PROMPT, source, f"{name} puts the DeepSeek-R1 template before the question")
    else:
        ctx.set(f"{worker}.worker_cls", "rubric_judge", source, "the judge rates each response 1-10 against the row's rubric (score rating / 10)")
        kwargs.update(temperature=0.0, rubric_key="rubric")
        why = "greedy, as Trinity-RFT asks; the rubric is each row's rubric column, copied into its extra_info"
        ctx.set("data.extra_info_keys", ["rubric"], source, "Trinity-RFT's rubric workflow reads each task's rubric column")
        _no_reward(ctx, prefix, item, name)
        if system is None:
            ctx.set("data.system_prompt", RUBRIC_SYSTEM_PROMPT, source, f"{name}'s system prompt when the taskset sets none (the R1 template's opening)")
    ctx.set(f"{worker}.tag_included", [""], source, "every row without a data_source column (Trinity-RFT judges every task of the taskset)")
    ctx.set(f"{worker}.reward_kwargs", kwargs, source, why)
    for arg, value in (item.get("workflow_args") or {}).items():
        ctx.refuse(f"{prefix}.workflow_args.{arg}", f"{name} takes no workflow_args", None, value)


def _gold(ctx: Context, prefix: str, item: dict[str, Any], source: str, rewards: dict[str, str]) -> None:
    """RULER's gold reward (math_reward unless the taskset names another): a metric, weight 0."""
    reward = item.get("default_reward_fn_type") or ctx.get(f"{_IN}.default_reward_fn_type") or "math_reward"
    ctx.consume(f"{prefix}.default_reward_fn_type", f"{prefix}.reward_fn_args")
    if reward not in rewards:
        ctx.refuse(source, f"math_ruler_workflow computes its gold reward with {reward!r}, which posttrain does not translate", None, reward)
        return
    ctx.set("reward.workers.gold.worker_cls", rewards[reward], source, f"RULER's gold reward ({reward}), logged as reward/gold/mean")
    ctx.set("reward.workers.gold.tag_included", [""], source, "every row the judge scores")
    ctx.set("reward.workers.gold.weight", 0.0, source, "a metric only: the reward is the judge's score")


def _no_reward(ctx: Context, prefix: str, item: dict[str, Any], name: str) -> None:
    ctx.consume(f"{prefix}.default_reward_fn_type", f"{prefix}.reward_fn_args")
    for key in ("default_reward_fn_type", "reward_fn_args"):
        if item.get(key):
            ctx.drop(f"{prefix}.{key}", f"{name} never calls the taskset's reward function: the judge gives the reward")


def max_tokens(ctx: Context, model: dict[str, Any]) -> int:
    """Trinity-RFT's server default for the judge's reply: its max_response_tokens, else the policy's."""
    return int(model.get("max_response_tokens") or ctx.get("model.max_response_tokens") or 2048)


def judge_models(ctx: Context, source: str, name: str, reply_length: str = "the judge worker's reward_kwargs.max_tokens") -> list[Any] | None:
    """explorer.auxiliary_models, the first translated as the judge of workflow `name` (`auxiliary_model`);
    None, with `source` refused, when there is none."""
    models = ctx.get(_AUX) or []
    if not isinstance(models, list) or not models or not isinstance(models[0], dict):
        ctx.refuse(source, f"workflow {name!r} calls the first of explorer.auxiliary_models as its judge, and there is none", None, name)
        return None
    auxiliary_model(ctx, models, reply_length)
    return models


def auxiliary_model(ctx: Context, models: list[Any], reply_length: str = "the judge worker's reward_kwargs.max_tokens") -> None:
    """explorer.auxiliary_models[0] -> reward.auxiliary_models.judge; later ones no judge workflow calls.
    `reply_length`: the posttrain setting that carries the judge's reply length."""
    ctx.consume(_AUX)
    base, model = "reward.auxiliary_models.judge", models[0]
    for i, extra in enumerate(models[1:], start=1):
        ctx.drop(f"{_AUX}[{i}]", "Trinity-RFT's judge workflows call only the first auxiliary model")
    for key, value in model.items():
        where = f"{_AUX}[0].{key}"
        if key == "model_path":
            ctx.set(f"{base}.model_path", value, where, "the judge model")
        elif key == "engine_type":
            if value == "vllm":
                ctx.set(f"{base}.engine.name", "vllm", where, "Trinity-RFT serves auxiliary models with vLLM")
            else:
                ctx.refuse(where, f"posttrain serves auxiliary models with hf, vllm or sglang, not {value!r}", None, value)
        elif key == "engine_num":
            if value == 1:
                ctx.drop(where, "one engine serves the auxiliary model")
            else:
                ctx.refuse(where, "posttrain serves each auxiliary model with one engine, one request at a time; set engine_num 1", None, value)
        elif key == "dtype":
            if value in _DTYPES:
                ctx.set(f"{base}.dtype", _DTYPES[value], where)
            else:
                ctx.refuse(where, f"expected one of {sorted(_DTYPES)}", None, value)
        elif key in _ENGINE:
            ctx.set(f"{base}.engine.{_ENGINE[key]}", value, where)
        elif key in _VLLM_KWARGS:
            ctx.set(f"{base}.engine.kwargs.{key}", value, where, "passed to vLLM as Trinity-RFT passes it")
        elif key in ("max_response_tokens", "max_tokens"):
            ctx.drop(where, f"{reply_length} (the server's default reply length in Trinity-RFT)")
        elif key == "enable_thinking" and value in (None, False):
            ctx.drop(where, "posttrain renders the judge's chat template without an enable_thinking variable: the same for a template "
                               "without a thinking switch (a hybrid-thinking template such as Qwen3's would think)")
        elif key in _INERT:
            ctx.drop(where, _INERT[key])
        else:
            ctx.refuse(where, "no posttrain counterpart for this auxiliary-model setting (posttrain: reward.auxiliary_models.<name>: model_path, dtype, engine)", None, value)
    for key, value in _DEFAULTS.items():
        if key not in model:
            ctx.set(f"{base}.engine.{_ENGINE[key]}", value, _AUX, f"Trinity-RFT's default {key}")
    if "dtype" not in model:
        ctx.set(f"{base}.dtype", "bf16", _AUX, "Trinity-RFT's default dtype (bfloat16)")
    if "engine_type" not in model:
        ctx.set(f"{base}.engine.name", "vllm", _AUX, "Trinity-RFT serves auxiliary models with vLLM")
    if "max_model_len" not in model and ctx.get("model.max_model_len"):
        ctx.set(f"{base}.engine.max_model_len", ctx.get("model.max_model_len"), _AUX, "Trinity-RFT's default: model.max_model_len")
