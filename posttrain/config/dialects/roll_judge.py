"""ROLL's LLM judge worker (roll/pipeline/rlvr/rewards/llm_judge_reward_worker.py): its engine, its
sampling and its served ("cluster") form, onto ``reward.workers.<name>`` (worker_cls llm_judge).

- ``strategy_args``: hf_infer and deepspeed_infer (ZeRO-3 only shards the weights) are the hf
  engine; vllm and sglang are ``engine.name`` with the strategy_config keys that size the engine as
  its options (`OPTIONS`) and every other key passed to the library's constructor
  (``engine.kwargs``), as ROLL passes them. ROLL's vllm strategy starts from ``load_format: dummy``
  (random weights, which the actor's sync replaces for a rollout engine but nothing replaces for a
  judge): only ``load_format: auto`` is accepted. ROLL sets the judge's ``sleep_level`` (1) and
  SGLang's ``enable_weights_cpu_backup`` (true) itself, whatever the file says: what posttrain's
  judge engine does.
- ``generating_args``: a ROLL GeneratingArguments, whose defaults (roll/configs/generating_args.py:
  do_sample true, temperature 0.95, top_p 0.7, top_k 50, max_new_tokens 8192) fill what the file
  leaves out, as ROLL passes the whole dataclass to the engine. ROLL's vllm and sglang sampling
  parameters have no do_sample (``create_sampling_params_for_vllm`` / ``_for_sglang``): temperature
  0 is greedy and any other samples, so on those engines do_sample is ``temperature > 0``.
- ``judge_model_type: cluster`` (added to ROLL in bd17364f, March 2026): the judge sends its prompts
  to the top-level ``reward_model`` role, a vLLM/SGLang InferWorker that holds the judge model once
  for every reward worker. Each request is the worker's prompt (its template, ``judge_prompt``),
  rendered in ``reward_model.data_args.template`` with the reward_model's tokenizer and sampled with
  the worker's ``generating_args`` (the request's generation_config replaces the InferWorker's own,
  base_worker.py); the answer is parsed as in inference mode. That is a judge worker whose model,
  dtype, chat template and engine are the reward_model's: posttrain runs it so, in the training
  process. ROLL v0.3.0's worker no longer accepts cluster ("Unsupported model type") though its
  pipeline still builds the reward_model role; posttrain follows the version that defines it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects.translate import Context

ENGINES = {"hf_infer": "hf", "deepspeed_infer": "hf", "vllm": "vllm", "sglang": "sglang"}
# strategy_config keys of ROLL's vllm / sglang strategies -> the judge engine's option of that meaning
OPTIONS: dict[str, dict[str, str]] = {
    "vllm": {"gpu_memory_utilization": "gpu_memory_utilization", "tensor_parallel_size": "tensor_model_parallel_size",
             "max_model_len": "max_model_len", "enforce_eager": "enforce_eager", "max_num_batched_tokens": "max_num_batched_tokens"},
    "sglang": {"mem_fraction_static": "gpu_memory_utilization", "tensor_parallel_size": "tensor_model_parallel_size",
               "context_length": "max_model_len"},
}
# strategy_config keys ROLL sets for a judge whatever the file says
_FORCED = {"sleep_level": "ROLL's judge sleeps at level 1 whatever the file says (its weights kept on the host), as posttrain's judge engine does",
           "enable_weights_cpu_backup": "ROLL keeps the judge's weights on the host whatever the file says, as posttrain's judge engine does"}
GENERATING_DEFAULTS: dict[str, Any] = {"do_sample": True, "temperature": 0.95, "top_p": 0.7, "top_k": 50, "max_new_tokens": 8192}
_DUMMY = ("ROLL's {name} strategy then builds the judge with random weights (load_format dummy), which nothing replaces "
          "for a judge; posttrain's judge engine reads the judge's weights: write load_format: auto")


def strategy(ctx: Context, name: str, foreign: str, value: Any) -> None:
    """A judge's ``strategy_args`` (``foreign``) -> ``reward.workers.<name>.engine``."""
    strategy_name = value.get("strategy_name") if isinstance(value, Mapping) else None
    options = value.get("strategy_config") if isinstance(value, Mapping) else None
    engine = ENGINES.get(strategy_name)
    if engine == "hf" and strategy_name == "hf_infer" and not options:
        ctx.drop(foreign, "hf_infer: posttrain's HF engine runs the judge")
    elif engine == "hf" and strategy_name == "deepspeed_infer":
        ctx.drop(foreign, "deepspeed_infer: ZeRO-3 inference only shards the judge's weights over its devices; posttrain's HF "
                          "engine runs it whole in the training process, with the same weights and sampling")
    elif engine in ("vllm", "sglang") and (options is None or isinstance(options, Mapping)):
        ctx.set(f"reward.workers.{name}.engine.name", engine, f"{foreign}.strategy_name", f"ROLL's {strategy_name} strategy")
        options = dict(options or {})
        if engine == "vllm" and "load_format" not in options:
            ctx.refuse(f"{foreign}.strategy_config.load_format", _DUMMY.format(name=strategy_name))
        for key, option in options.items():
            _option(ctx, name, engine, f"{foreign}.strategy_config.{key}", key, option)
    else:
        ctx.refuse(foreign, "posttrain runs a judge on the hf, vllm or sglang engine (strategy_name hf_infer, deepspeed_infer, "
                            "vllm or sglang)", None, value)


def _option(ctx: Context, name: str, engine: str, foreign: str, key: str, value: Any) -> None:
    """One strategy_config key of a vllm / sglang judge."""
    base = f"reward.workers.{name}.engine"
    if key in OPTIONS[engine]:
        ctx.set(f"{base}.{OPTIONS[engine][key]}", value, foreign)
    elif key == "load_format" and value == "auto":
        ctx.drop(foreign, "auto: the judge's engine reads its weights from model_args.model_name_or_path, as posttrain's always does")
    elif key == "load_format":
        ctx.refuse(foreign, _DUMMY.format(name=engine), None, value)
    elif key in _FORCED:
        ctx.drop(foreign, _FORCED[key])
    elif key == "VLLM_USE_V1" and value in (1, "1", True):
        ctx.drop(foreign, "vLLM's V1 engine, the one posttrain's vllm adapter is written against")
    elif key == "VLLM_USE_V1":
        ctx.refuse(foreign, "vLLM's V0 engine: posttrain's vllm adapter is written against the V1 engine", None, value)
    else:
        ctx.set(f"{base}.kwargs.{key}", value, foreign, f"passed to the judge's {engine} constructor")


def generating_args(ctx: Context, name: str, foreign: str, value: Any, engine: str) -> None:
    """A judge's ``generating_args`` (``foreign``; None: absent) with ROLL's defaults for what it
    leaves out; on vllm / sglang do_sample is whether the temperature is above 0."""
    args = dict(value) if isinstance(value, Mapping) else {}
    if value is not None and not isinstance(value, Mapping):
        ctx.refuse(foreign, f"expected a mapping of ROLL generating arguments, got {value!r}", None, value)
        return
    filled = [k for k in GENERATING_DEFAULTS if k not in args]
    args = {**GENERATING_DEFAULTS, **args}
    why = f"ROLL's GeneratingArguments defaults for {', '.join(filled)}" if filled else ""
    if engine != "hf":
        sample = bool(args.get("temperature")) and args["temperature"] > 0
        if "do_sample" in value_keys(value) and args["do_sample"] != sample:
            why = (why + "; " if why else "") + f"do_sample {args['do_sample']} is not read by ROLL's {engine} sampling: the temperature decides"
        args["do_sample"] = sample
    ctx.set(f"reward.workers.{name}.generating_args", args, foreign, why)


def value_keys(value: Any) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, Mapping) else ()


def engine_of(spec: Mapping[str, Any]) -> str:
    """The posttrain engine a judge spec's strategy_args names (hf when absent or unknown)."""
    args = spec.get("strategy_args")
    return ENGINES.get(args.get("strategy_name") if isinstance(args, Mapping) else None, "hf")


# Keys of a cluster-mode judge that the reward_model role replaces or that only place the worker.
_CLUSTER_UNREAD = {
    "model_args": "cluster mode loads the judge model and its tokenizer from reward_model.model_args",
    "data_args": "cluster mode renders the judge prompt in reward_model.data_args.template",
    "strategy_args": "cluster mode generates on the reward_model role's engine (reward_model.strategy_args)",
    "device_mapping": "a cluster-mode worker is a client on no device; the judge runs in the training process",
    "world_size": "the number of client processes sending the reward_model requests: placement only, the scores are the same",
    "infer_batch_size": "cluster mode sends each prompt as its own request",
}


def cluster(ctx: Context, name: str, spec: Mapping[str, Any]) -> set[str]:
    """A ``judge_model_type: cluster`` worker and the ``reward_model`` role -> one judge worker
    (module docstring); the worker keys it translated."""
    where = f"rewards.{name}"
    role = ctx.get("reward_model")
    if not isinstance(role, Mapping):
        ctx.refuse(f"{where}.judge_model_type", "cluster mode sends the judge's prompts to the top-level reward_model role, "
                                                "and this file has none", None, "cluster")
        return {"judge_model_type"}
    if not role.get("device_mapping"):  # rlvr_pipeline.py builds the role's cluster only on devices
        ctx.refuse(f"{where}.judge_model_type", "ROLL serves the reward_model role only when it has a device_mapping; "
                                                "without one the cluster-mode judge finds no server: give the role its devices", None, "cluster")
        return {"judge_model_type"}
    ctx.consume("reward_model")
    ctx.drop(f"{where}.judge_model_type", "cluster: the judge served by the reward_model role, run as this judge worker in the training process")
    for key in sorted(set(spec) & set(_CLUSTER_UNREAD)):
        ctx.drop(f"{where}.{key}", _CLUSTER_UNREAD[key])
    for key, value in role.items():
        foreign = f"reward_model.{key}"
        if key == "model_args" and isinstance(value, Mapping):
            for sub, v in value.items():
                ctx.set(f"reward.workers.{name}.model_args.{sub}", v, f"{foreign}.{sub}", "the served judge model")
        elif key == "data_args" and isinstance(value, Mapping):
            for sub, v in value.items():
                if sub == "template" and v is not None:
                    ctx.set(f"reward.workers.{name}.chat_template_name", v, f"{foreign}.template", "the chat template of the judge's prompt")
                else:
                    ctx.drop(f"{foreign}.{sub}", "cluster mode reads only data_args.template of the reward_model role")
        elif key == "strategy_args":
            strategy(ctx, name, foreign, value)
        elif key == "generating_args":
            ctx.drop(foreign, f"each request carries the worker's generating_args ({where}.generating_args), which replace the role's")
        elif key in ("name", "device_mapping", "num_gpus_per_worker") or (key == "worker_cls" and value == "roll.pipeline.base_worker.InferWorker"):
            ctx.drop(foreign, "names or places the served judge: the scores are the same")
        else:
            ctx.refuse(foreign, "no posttrain equivalent for this key of the reward_model role", None, value)
    generating_args(ctx, name, f"{where}.generating_args", spec.get("generating_args"), engine_of(role))
    return {"judge_model_type", "generating_args", *_CLUSTER_UNREAD}
