"""Trinity-RFT's explorer-side keys that are more than one key to one key.

- ``explorer.max_timeout`` and ``max_retry_times``: Trinity-RFT's per-task timeout and retries are
  posttrain's explorer.max_timeout and max_retry_times (a task is a prompt group, posttrain.trainer.
  deadlines), kept as written (`timeouts`). Left at Trinity-RFT's defaults (900 or 1800 s, 2
  retries) they are dropped, so that a file that never chose a timeout runs on every engine (vLLM
  and SGLang cannot stop at a deadline) with no limit, as before.
  With an agent-function workflow (posttrain_agent_workflow or an AgentScope one) the timeout
  bounds each episode instead (rollout.agent.timeout, `_agent_timeouts`).
- ``explorer.over_rollout``: posttrain's own keys (posttrain.rollout.progress). Trinity-RFT refuses a
  ratio above 0 with ``synchronizer.sync_style`` fixed, its default, so such a file is refused here
  too (`over_rollout`), though posttrain could run it: its trainer reads each step's batch whole,
  whatever its size, in every sync style.
- Workflow-runner keys posttrain refuses (posttrain.config.sections.explorer.UNSUPPORTED) are
  accepted at the values that are what posttrain does anyway: dynamic timeouts off (`accepted_default`).
- ``explorer.rollout_model.engine_num`` × ``tensor_parallel_size``: the explorer's devices, which
  posttrain places as Trinity-RFT does (`engines`).
- ``algorithm.sample_strategy``: ``default`` (and its deprecated alias ``warmup``) reads the buffer's
  batches in order, as posttrain's trainer does; ``staleness_control`` drops experiences whose
  model version lags the step by more than ``staleness_limit``, which posttrain never produces when
  its own bound (sync_interval - 1 + sync_offset, enforced where it generates) is tighter; ``mix`` is
  the mix types' expert rows (posttrain.config.dialects.trinity_types).
- ``buffer.trainer_input.auxiliary_buffers`` and ``explorer.auxiliary_models`` serve the mix and the
  distillation types (trinity_types translates them there), and the first auxiliary model is the
  judge of the RULER and rubric judge workflows (trinity_judges); any other use is a Trinity-RFT
  workflow or sample strategy posttrain does not run, refused with that reason.
"""

from __future__ import annotations

import math
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_algorithms import TYPES
from posttrain.config.dialects.trinity_agentscope import JUDGED
from posttrain.config.dialects.trinity_judges import JUDGE_WORKFLOWS, training_workflow
from posttrain.config.dialects.trinity_agent import AGENT
from posttrain.config.dialects.trinity_agentscope import FUNCTIONS as AGENTSCOPE_FUNCTIONS
from posttrain.config.tables import Rule

AGENT_FUNCTION_WORKFLOWS = (AGENT, *AGENTSCOPE_FUNCTIONS)  # a task of theirs is one agent-function episode

# key -> (values accepted as what posttrain does, why)
ACCEPTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "explorer.dynamic_timeout.enable": ((False,), "false: no dynamic timeout, as posttrain has none"),
    "explorer.rollout_model.use_v1": ((True,), "true (Trinity-RFT's default): vLLM's V1 engine, the engine every vLLM release "
                                               "posttrain supports runs by default"),
}


def accepted_default(key: str, value: Any) -> str | None:
    """Why ``value`` of a refused explorer key may be dropped (it is what posttrain does), else None."""
    values, why = ACCEPTED.get(key, ((), ""))
    return why if any(value == v and type(value) is type(v) for v in values) else None


_TIMEOUT, _RETRIES = "explorer.max_timeout", "explorer.max_retry_times"
_DEFAULT_TIMEOUTS, _DEFAULT_RETRIES = (900, 1800), 2  # Trinity-RFT's default max_timeout (1800; 900 in older versions) and retries


def timeouts(ctx: Context) -> None:
    """Trinity-RFT's per-task timeout and retries onto explorer.max_timeout / max_retry_times (module
    docstring). Retries set alone run under Trinity-RFT's default timeout, 1800 s, as they do there."""
    if not (ctx.has(_TIMEOUT) or ctx.has(_RETRIES)):
        return
    ctx.consume(_TIMEOUT, _RETRIES)
    timeout, retries = ctx.get(_TIMEOUT), ctx.get(_RETRIES)
    bad = [(k, v, want) for k, v, want in ((_TIMEOUT, timeout, "a number of seconds > 0"), (_RETRIES, retries, "a whole number >= 0"))
           if v is not None and not _valid(v, k == _RETRIES)]
    for key, value, want in bad:
        ctx.refuse(key, f"expected {want}, got {value!r}", key, value)
    if bad:
        return
    if training_workflow(ctx) in AGENT_FUNCTION_WORKFLOWS:
        _agent_timeouts(ctx, timeout, retries)
        return
    if timeout in (None, *_DEFAULT_TIMEOUTS) and retries in (None, _DEFAULT_RETRIES):
        why = ("Trinity-RFT's default, which a file that never chose a timeout carries: posttrain then sets no deadline, so the "
               "file runs on any engine (set another value to have posttrain bound each prompt group: explorer.max_timeout)")
        for key in (k for k in (_TIMEOUT, _RETRIES) if ctx.has(k)):
            ctx.drop(key, why)
        return
    ctx.set(_TIMEOUT, 1800 if timeout is None else timeout, _TIMEOUT if timeout is not None else _RETRIES,
            "seconds a training batch's prompt groups (Trinity-RFT's tasks) may take to generate and score; "
            "a group past it is generated again or left out" + ("" if timeout is not None else " (Trinity-RFT's default 1800, under which the retries run)"))
    ctx.set(_RETRIES, _DEFAULT_RETRIES if retries is None else retries, _RETRIES if retries is not None else _TIMEOUT,
            "times a late prompt group is generated again before it is left out" + ("" if retries is not None else " (Trinity-RFT's default 2)"))


def _agent_timeouts(ctx: Context, timeout: Any, retries: Any) -> None:
    """An agent-function workflow (posttrain_agent_workflow, the AgentScope ones): a Trinity-RFT task
    is a run of the workflow, so max_timeout bounds each episode (rollout.agent.timeout), whose late
    calls are then dropped as Trinity-RFT drops a timed-out task's experiences. posttrain does not
    run an episode again: only Trinity-RFT's default retries are accepted (they change the drop into
    a retry there)."""
    if timeout is not None:
        ctx.set("rollout.agent.timeout", timeout, _TIMEOUT, "Trinity-RFT's per-task timeout: seconds one agent episode may take; a "
                "later episode fails and is dropped (or trains with rollout.agent.failure_penalty), counted against "
                "rollout.agent.max_failure_rate")
    if retries is None:
        return
    if retries == _DEFAULT_RETRIES or retries == 0:
        ctx.drop(_RETRIES, f"{retries}: posttrain does not run a timed-out agent episode again (Trinity-RFT's "
                           f"{'default ' if retries else ''}retries of a late task)" + (": its late episodes are dropped" if retries else ""))
    else:
        ctx.refuse(_RETRIES, "posttrain does not run a timed-out agent episode again (it is dropped, or trains with "
                             "rollout.agent.failure_penalty); remove it or set 0", None, retries)


def _valid(value: object, whole: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        return False
    return value >= 0 if whole else value > 0


_RATIO, _WAIT, _STYLE = "explorer.over_rollout.ratio", "explorer.over_rollout.wait_after_min", "synchronizer.sync_style"


def over_rollout(ctx: Context) -> None:
    """Trinity-RFT's rule: over-rollout (ratio > 0) needs a dynamic sync style. There the trainer
    reads a fixed number of experiences per step, so a step with cancelled tasks would take
    experiences of the next explorer step and the fixed schedule of weight syncs would no longer
    match the explorer's steps. posttrain's trainer reads each explorer step's batch whole whatever
    its size, so it has no such rule; the file is refused as Trinity-RFT refuses it, not run with a
    meaning it never had. Values out of range are left to posttrain's own check of the key."""
    ratio, style = ctx.get(_RATIO, 0.0), ctx.get(_STYLE, "fixed")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0 or str(style).lower() != "fixed":
        return
    ctx.consume(_RATIO, _WAIT)
    ctx.refuse(_RATIO, f"Trinity-RFT refuses over_rollout.ratio {ratio} with synchronizer.sync_style fixed (its default), so the file "
                       "does not run there; set sync_style to dynamic_by_explorer or dynamic_by_trainer, as Trinity-RFT asks "
                       "(posttrain honours over-rollout in every style), or remove the ratio", _RATIO, ratio)
    if ctx.has(_WAIT):
        ctx.drop(_WAIT, "read only with over_rollout.ratio > 0, refused here")


_ENGINES, _TP = "explorer.rollout_model.engine_num", "explorer.rollout_model.tensor_parallel_size"
_OPENAI = "explorer.rollout_model.enable_openai_api"


def engines(ctx: Context) -> None:
    """Trinity-RFT gives its explorer engine_num × tensor_parallel_size of the cluster's
    node_num × gpu_per_node devices and its trainer the rest (mode both), or the explorer alone
    (mode explore). posttrain places it the same way: cluster.device_mapping.actor on the first
    devices and .rollout on the explorer's after them (a split placement: an explorer of engine_num
    processes beside the trainer), or .rollout alone in mode explore. One device in all runs everything in
    one process, as Trinity-RFT's colocate mode does."""
    given = ctx.has(_ENGINES)
    ctx.consume(_ENGINES)
    count, tp, mode = ctx.get(_ENGINES, 1), ctx.get(_TP, 1), ctx.get("mode", "both")
    nodes, per_node = ctx.get("cluster.node_num", 1), ctx.get("cluster.gpu_per_node", 0)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (count, tp, nodes, per_node)) or count < 1 or tp < 1:
        if given:
            ctx.refuse(_ENGINES, f"expected a whole number of engines (>= 1) with whole device counts, got engine_num {count!r}, tensor_parallel_size {tp!r}", None, count)
        return
    total, need = nodes * per_node, count * tp
    origin = _ENGINES if given else "cluster.gpu_per_node"
    if mode == "serve":  # posttrain.trainer.serving: one engine behind the endpoint
        if ctx.has(_OPENAI):  # Trinity-RFT turns it on in serve mode whatever the file says
            ctx.consume(_OPENAI)
            ctx.drop(_OPENAI, "mode serve always answers OpenAI-compatible chat completions (posttrain.trainer.serving); Trinity-RFT sets it in serve mode too")
        if count > 1:
            ctx.refuse(_ENGINES, f"posttrain's serve mode runs one engine in one process (requests are served one at a time); "
                                 f"{count} engines behind one endpoint have no counterpart: set engine_num 1", None, count)
        elif given:
            ctx.drop(_ENGINES, "one engine: posttrain's serve mode")
        return
    if mode not in ("both", "explore"):
        if given:
            ctx.drop(_ENGINES, f"mode {mode} runs no explorer")
        return
    if total <= 1:
        if need > 1:
            ctx.refuse(_ENGINES, f"{count} engine(s) × tensor_parallel_size {tp} need {need} devices, but cluster.node_num × gpu_per_node gives {total or 'none (one process)'}; set cluster.gpu_per_node", None, count)
        elif given:
            ctx.drop(_ENGINES, "one engine in the run's one process (Trinity-RFT's colocate mode: one device)")
        return
    if mode == "explore":
        if need > total:
            ctx.refuse(_ENGINES, f"the explorer's {need} devices (engine_num × tensor_parallel_size) exceed the cluster's {total}", None, count)
        else:
            ctx.set("cluster.device_mapping.rollout", list(range(need)), origin, f"the explorer alone: {count} engine process(es) on devices 0..{need - 1}")
        return
    if need >= total:
        ctx.refuse(_ENGINES, f"the explorer's {need} devices (engine_num × tensor_parallel_size) leave none of the cluster's {total} for the trainer (Trinity-RFT refuses this too)", None, count)
        return
    trainer = total - need
    ctx.set("cluster.device_mapping.actor", list(range(trainer)), origin, f"Trinity-RFT's trainer devices: the {total} of the cluster less the explorer's {need}")
    ctx.set("cluster.device_mapping.rollout", list(range(trainer, total)), origin,
            f"split placement: an explorer of {count} engine process(es) on devices {trainer}..{total - 1}, beside a trainer of {trainer}")


_STRATEGY, _ARGS = "algorithm.sample_strategy", "algorithm.sample_strategy_args"
_AUX_BUFFERS, _AUX_MODELS = "buffer.trainer_input.auxiliary_buffers", "explorer.auxiliary_models"


def sample_strategy(ctx: Context) -> None:
    """The sample strategy of a type that is not a mix type (those: trinity_types._expert)."""
    if _STRATEGY in ctx.handled or not ctx.has(_STRATEGY):
        return
    ctx.consume(_STRATEGY, _ARGS)
    name, args = ctx.get(_STRATEGY), ctx.get(_ARGS) or {}
    if not isinstance(args, dict):
        ctx.refuse(_ARGS, "expected a mapping of the sample strategy's arguments", None, args)
        return
    if name in ("default", "warmup"):
        ctx.drop(_STRATEGY, f"{name}: the trainer reads the buffer's batches in order, as posttrain's does")
        for arg, value in args.items():
            ctx.refuse(f"{_ARGS}.{arg}", f"the {name} sample strategy takes no arguments", None, value)
    elif name == "staleness_control":
        _staleness(ctx, args)
    elif name == "mix":
        ctx.refuse(_STRATEGY, "the mix strategy feeds expert rows to the mix and mix_chord algorithm types (posttrain: algorithm.mix); name one of those types", None, name)
    else:
        ctx.refuse(_STRATEGY, f"unknown sample_strategy {name!r}; Trinity-RFT's are default, staleness_control and mix", None, name)


def _staleness(ctx: Context, args: dict[str, Any]) -> None:
    """Trinity-RFT trains step s only on experiences of model version >= s - staleness_limit. posttrain
    never samples batch s with weights older than step s - 1 - bound (bound = sync_interval - 1 +
    sync_offset), so step - version <= bound + 1: within the limit, nothing is ever dropped."""
    names = [n for n in ("staleness_limit", "max_staleness") if n in args]  # Trinity-RFT's name, then its older one
    for other in sorted(set(args) - set(names)):
        ctx.refuse(f"{_ARGS}.{other}", "not an argument of the staleness_control sample strategy (staleness_limit)", None, args[other])
    limit = args[names[0]] if names else math.inf
    bound = ctx.get("synchronizer.sync_interval", 1) - 1 + ctx.get("synchronizer.sync_offset", 0)
    style = ctx.get("synchronizer.sync_style", "fixed")
    if not isinstance(limit, (int, float)) or isinstance(limit, bool):
        ctx.refuse(f"{_ARGS}.{names[0]}", f"expected a number of steps, got {limit!r}", None, limit)
    elif style != "fixed" and limit != math.inf:
        ctx.refuse(_STRATEGY, f"posttrain bounds staleness where it generates, not by dropping stale experiences, and with synchronizer.sync_style {style} only the buffer's capacity bounds how far the explorer runs ahead, so experiences past staleness_limit {limit} could be trained on; use sync_style fixed with sync_interval + sync_offset <= {limit}", None, "staleness_control")
    elif bound + 1 <= limit:
        ctx.drop(_STRATEGY, f"staleness_control (limit {limit}): posttrain's explorer never samples with weights more than sync_interval - 1 + sync_offset = {bound} steps behind the step's, so no experience is past the limit")
        for name in names:
            ctx.drop(f"{_ARGS}.{name}", "read with sample_strategy staleness_control")
    else:
        ctx.refuse(_STRATEGY, f"posttrain bounds staleness where it generates, not by dropping stale experiences: its bound (sync_interval - 1 + sync_offset = {bound}) lets experiences {bound + 1} steps behind through, past staleness_limit {limit}; lower synchronizer.sync_interval / sync_offset so that sync_interval + sync_offset <= {limit}", None, "staleness_control")


def auxiliary(ctx: Context) -> None:
    """Auxiliary buffers and models that no mix or distillation type took."""
    kind = TYPES.get(ctx.get("algorithm.algorithm_type", "ppo"))
    if ctx.has(_AUX_BUFFERS) and _AUX_BUFFERS not in ctx.handled and ctx.get(_AUX_BUFFERS):
        ctx.consume(_AUX_BUFFERS)
        ctx.refuse(_AUX_BUFFERS, "Trinity-RFT reads auxiliary buffers in its mix sample strategy (posttrain: the mix and mix_chord types' expert rows, algorithm.mix) or in custom strategies posttrain does not run; this algorithm type trains on the explorer's experiences alone", None, ctx.get(_AUX_BUFFERS))
    if ctx.has(_AUX_MODELS) and _AUX_MODELS not in ctx.handled and ctx.get(_AUX_MODELS) in ([], None):
        ctx.consume(_AUX_MODELS)  # Trinity-RFT's default, an empty list: no model to serve
        ctx.drop(_AUX_MODELS, "no auxiliary models (Trinity-RFT's default), as posttrain serves none unless reward.auxiliary_models names some")
    if training_workflow(ctx) in (*JUDGE_WORKFLOWS, *JUDGED):  # the judge's model: trinity_judges, trinity_agentscope
        return
    if ctx.has(_AUX_MODELS) and _AUX_MODELS not in ctx.handled and ctx.get(_AUX_MODELS):
        ctx.consume(_AUX_MODELS)
        why = "" if kind is None or not kind.teacher else " (beyond the distillation teacher)"
        ctx.refuse(_AUX_MODELS, f"auxiliary models{why} serve the Trinity-RFT workflows that call them; posttrain translates them for the RULER and rubric judge workflows (reward.auxiliary_models with a ruler_judge or rubric_judge worker), and this file's workflow calls none", None, ctx.get(_AUX_MODELS))


_MIX = (("algorithm.algorithm_type", "mix"),)
RULES: dict[str, Rule] = {
    _TIMEOUT: Rule(_TIMEOUT, "a per-task timeout: seconds a training batch's prompt groups may take (posttrain.trainer.deadlines); Trinity-RFT's defaults (900, 1800) with default retries are dropped (no limit); with an agent-function workflow (posttrain_agent_workflow, agentscope_react_workflow, agentscope_react_math_workflow): seconds one episode may take (rollout.agent.timeout)", 60),
    _RETRIES: Rule(_RETRIES, "retries of a prompt group past explorer.max_timeout before it is left out; alone, under Trinity-RFT's default timeout 1800; with an agent-function workflow only 0 or Trinity-RFT's default 2 (dropped: posttrain does not run an episode again)", 3, ((_TIMEOUT, 60),)),
    _STRATEGY: Rule(None, "default (and warmup) read the buffer's batches in order, as posttrain does; staleness_control is accepted when posttrain's own staleness bound (sync_interval - 1 + sync_offset, enforced where it generates) keeps every experience within staleness_limit, else refused; mix is the mix types' expert rows (algorithm.mix)", "default"),
    _ARGS: Rule(None, "staleness_control: staleness_limit, checked against posttrain's bound (see sample_strategy); mix: expert_data_ratio and sft_dataset_name (algorithm.mix)", {"staleness_limit": 4}, ((_STRATEGY, "staleness_control"),)),
    _AUX_BUFFERS: Rule("algorithm.mix.expert_files", "the mix and mix_chord types: the expert SFT buffer named by sample_strategy_args.sft_dataset_name (posttrain.config.dialects.trinity_types); other types' auxiliary buffers are refused (custom sample strategies posttrain does not run)", {"sft_dataset": {"path": "org/dataset"}}, _MIX),
    _AUX_MODELS: Rule("ref.model_path", "the distillation types (on_policy_distill, jsd): the first model is the teacher, posttrain's reference role; with the RULER or rubric judge workflow the first model is reward.auxiliary_models.judge, the judge's model (posttrain.config.dialects.trinity_judges); other uses are refused", [{"model_path": "teacher"}], (("algorithm.algorithm_type", "on_policy_distill"),)),
}
