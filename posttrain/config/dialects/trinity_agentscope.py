"""Trinity-RFT's AgentScope ReAct workflows in a Trinity-RFT file: posttrain's built-in agent functions.

Trinity-RFT runs AgentScope's ReActAgent against its rollout model's OpenAI server and trains on
the recorded calls. posttrain does the same with an agent function (`rollout.agent`, docs/agentic.md
"Built-in agents"), so a taskset naming one of these workflows becomes:

- ``agentscope_react_workflow`` -> ``rollout.agent.function: posttrain.agents.agentscope_react:template_agent``
  with ``rollout.agent.kwargs`` {type, prompt_key, response_key, max_tokens}: ``workflow_args.type``
  (Trinity-RFT's template, ``gsm8k`` its default and only one), the taskset's ``format.prompt_key`` /
  ``response_key`` (Trinity-RFT's defaults prompt / response when unset) and
  ``rollout_args.max_tokens`` (else Trinity-RFT's 4096);
- ``agentscope_react_math_workflow`` -> ``...:math_agent`` with the same kwargs less ``type`` (the
  workflow reads no workflow_args);
- the ``agentscope_frozenlake`` example's ``examples.agentscope_frozenlake.workflow.FrozenLakeWorkflow``
  -> ``posttrain.agents.agentscope_frozenlake:frozenlake_agent`` with kwargs {agent_max_steps,
  is_slippery, max_tokens} (``rollout_args.max_tokens``, else null: the response length, as Trinity-RFT's
  model default); ``env_max_steps`` and ``desc`` are dropped (the example's environment redraws its map
  from the row on reset, with its default bound of 8 moves), and ``data.prompt_key`` becomes ``uid``
  (the lake rows have no prompt; the agent writes its own).

Their other workflow_args are the ones ``posttrain_agent_workflow`` takes besides ``function``
(max_concurrency, timeout, failure_penalty, max_failure_rate: rollout.agent.*); any other is
dropped, as the Trinity-RFT workflows read none. The taskset's reward function and its arguments
are dropped: both workflows score with Trinity-RFT's MathBoxedRewardFn whatever the taskset names
(the template passes reward_fn_args to its constructor, which reads none). With the function set,
the rollout model's OpenAI server, history and parser keys are accepted as for
``posttrain_agent_workflow`` (posttrain.config.dialects.trinity_agent). An evaluation taskset is
accepted when it names the training taskset's workflow with the same kwargs (posttrain validates
with the training stage's agent function), else refused.

``agentscopev0_react_math_workflow`` imports AgentScope's v0 API (``agentscope.service``,
``agentscope.agents.ReActAgentV2``), which the agentscope that Trinity-RFT's own ``agent`` extra
installs (``agentscope[tuner]>=1.0.18``: 1.0.18 and every release since, 2.x included) no longer
has: Trinity-RFT stops on it too. It is refused, pointing at the v1 workflow.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_agent import ARGS, PARSER_KEYS, SERVER_KEYS
from posttrain.config.dialects.trinity_judges import judge_models, max_tokens

MODULE = "posttrain.agents.agentscope_react"
FROZENLAKE = "examples.agentscope_frozenlake.workflow.FrozenLakeWorkflow"  # Trinity-RFT's example of that name
SEARCH = "agentscope_v1_react_search_workflow"  # the agentscope_websearch example's
EMAIL = "email_search_workflow"  # the grpo_email_search example's
FUNCTIONS = {"agentscope_react_workflow": f"{MODULE}:template_agent", "agentscope_react_math_workflow": f"{MODULE}:math_agent",
             FROZENLAKE: "posttrain.agents.agentscope_frozenlake:frozenlake_agent",
             SEARCH: "posttrain.agents.agentscope_search:search_agent", EMAIL: "posttrain.agents.email_search:email_agent"}
JUDGED = (SEARCH, EMAIL)  # their first auxiliary model is the judge (reward.auxiliary_models.judge)
_AGENT_ARGS = {SEARCH: ("max_turns", "search_client_type"), EMAIL: ("max_turns",)}  # workflow_args that are the agent's kwargs
_UNREAD = {(EMAIL, "tool_obs_char_limit"): "email_search_workflow reads it but never uses it: tool answers are not cut in Trinity-RFT either"}
# what the FrozenLake example's environment discards: its reset redraws the map from the row with its own bound
_LAKE_UNREAD = {"env_max_steps": "the example's environment redraws its map on reset with its default bound of 8 moves, "
                                 "whatever env_max_steps says (posttrain draws it the same way)",
                "desc": "the example's environment redraws its map from the row's size, p and seed on reset, whatever desc says"}
V0 = "agentscopev0_react_math_workflow"
TEMPLATE_TYPES = ("gsm8k",)  # posttrain.agents.agentscope_react.TEMPLATES, as Trinity-RFT's TEMPLATE_MAP
DEFAULT_MAX_TOKENS = 4096  # what both workflows ask per call when rollout_args.max_tokens is unset
V0_REASON = (f"{V0} imports AgentScope's v0 API (agentscope.service, agentscope.agents.ReActAgentV2), which the agentscope "
             "that Trinity-RFT's own agent extra installs (agentscope[tuner]>=1.0.18) no longer has, so Trinity-RFT stops on this "
             "line too with its own pinned agentscope; use agentscope_react_math_workflow (AgentScope's v1 ReActAgent with the "
             "same Python tool and boxed-answer reward), which posttrain runs as its built-in agent function")


def agentscope_workflow(ctx: Context, prefix: str, item: dict[str, Any], name: str, source: str, args: dict[str, Any],
                        training: bool, reward_keys: list[str]) -> None:
    """One taskset naming an AgentScope workflow (module docstring)."""
    if name == V0:
        ctx.refuse(source, V0_REASON, None, name)
        for key in reward_keys:
            ctx.drop(key, f"the reward function of workflow {name!r} at {source}, which is refused")
        for key in (*SERVER_KEYS, *PARSER_KEYS):  # they serve the refused workflow, not a refusal of their own
            if training and ctx.has(key) and key not in ctx.handled:
                ctx.consume(key)
                ctx.drop(key, f"serves {name} at {source}, which is refused (with agentscope_react_math_workflow it is "
                              "the agent function's endpoint setting)")
        return
    for key in reward_keys:
        if name == EMAIL:
            ctx.drop(key, f"{name} scores with its own rubric (the agent function's); reward_fn_args.llm_as_a_judge is "
                          "rollout.agent.kwargs.llm_as_a_judge")
            continue
        ctx.drop(key, f"{name} rewards its walks itself (the goal's 1.0), whatever the taskset names" if name == FROZENLAKE else
                 f"{name} scores with Trinity-RFT's MathBoxedRewardFn (posttrain's math_boxed scorer, in the agent "
                 "function) whatever the taskset names, and its constructor reads no arguments")
    function, kwargs = FUNCTIONS[name], _kwargs(ctx, item, name, args)
    if kwargs is None:
        ctx.refuse(f"{prefix}.workflow_args.type", f"{name} has no template for type {args.get('type')!r}; Trinity-RFT and "
                                                   f"posttrain have {list(TEMPLATE_TYPES)}", "rollout.agent.kwargs.type", args.get("type"))
        return
    if not training:
        _evaluation(ctx, prefix, name, source, function, kwargs, args)
        return
    if name in JUDGED and kwargs.get("llm_as_a_judge", True) and judge_models(ctx, source, name, "rollout.agent.kwargs.judge_max_tokens") is None:
        return
    if name in JUDGED and not kwargs.get("llm_as_a_judge", True) and ctx.get("explorer.auxiliary_models"):
        ctx.consume("explorer.auxiliary_models")
        ctx.drop("explorer.auxiliary_models", f"{name} asks no judge with reward_fn_args.llm_as_a_judge false")
    ctx.set("rollout.agent.function", function, source, f"{name}: AgentScope's ReActAgent as posttrain's built-in agent "
                                                         "function, its calls recorded and trained (rollout.agent)")
    if name == FROZENLAKE and not (item.get("format") or {}).get("prompt_key"):
        # the rows are lakes (seed, size, p, index, uid: Trinity-RFT's get_frozen_lake_data.py) with no
        # prompt; the agent writes its own, and a step's batch of rows needs a text column to carry
        ctx.set("data.prompt_key", "uid", source, "the lake rows have no prompt (the agent writes its own): each row's uid "
                                                 "stands in as the batch's prompt text, which the agent never reads")
    ctx.set("rollout.agent.kwargs", kwargs, source, "the workflow's settings: " + (
        "workflow_args.agent_max_steps and is_slippery, rollout_args.max_tokens (else the response length)" if name == FROZENLAKE else
        ", ".join(["workflow_args.type"] * ("type" in kwargs) + ["the taskset's format.prompt_key / response_key",
                                                                 "rollout_args.max_tokens (else 4096)"])))
    for arg, value in args.items():
        key = f"{prefix}.workflow_args.{arg}"
        if name == FROZENLAKE and arg in ("agent_max_steps", "is_slippery"):
            ctx.report.add(_entry(key, f"rollout.agent.kwargs.{arg}", value, "the walk's setting (is_slippery: unless the row has its own)"))
        elif name == FROZENLAKE and arg in _LAKE_UNREAD:
            ctx.drop(key, _LAKE_UNREAD[arg])
        elif arg in _AGENT_ARGS.get(name, ()):
            ctx.report.add(_entry(key, f"rollout.agent.kwargs.{arg}", value, "the agent's setting"))
        elif (name, arg) in _UNREAD:
            ctx.drop(key, _UNREAD[name, arg])
        elif name == SEARCH and arg == "max_model_tokens":
            _max_model_tokens(ctx, key, value)
        elif arg == "type":
            ctx.report.add(_entry(key, "rollout.agent.kwargs.type", value, "the template (Trinity-RFT's TEMPLATE_MAP key)"))
        elif arg in ARGS and arg != "function":
            ctx.set(f"rollout.agent.{arg}", value, key, "posttrain's agent-function setting")
        else:
            ctx.drop(key, f"{name} reads {'only workflow_args.type' if 'type' in kwargs else 'no workflow_args'}, so it changes "
                          "nothing in Trinity-RFT either (posttrain's agent-function settings "
                          f"{[a for a in ARGS if a != 'function']} are taken too)")


def _kwargs(ctx: Context, item: dict[str, Any], name: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """The agent function's keyword arguments for this taskset (None: an unknown template type)."""
    fmt, rollout_args = item.get("format") or {}, item.get("rollout_args") or {}
    kwargs: dict[str, Any] = {}
    if name == FROZENLAKE:  # the row is the lake (size, p, seed): no question or answer columns
        kwargs["agent_max_steps"] = args.get("agent_max_steps", 10)
        kwargs["is_slippery"] = args.get("is_slippery", False)
        kwargs["max_tokens"] = rollout_args.get("max_tokens")  # None: the response length, as Trinity-RFT's model default
        return kwargs
    if name in JUDGED:
        models = ctx.get("explorer.auxiliary_models") or [{}]
        judge = models[0] if isinstance(models, list) and models and isinstance(models[0], dict) else {}
        kwargs.update(max_turns=int(args.get("max_turns", 10)), judge_max_tokens=max_tokens(ctx, judge))  # the judge server's default reply length
    if name == SEARCH:
        kwargs["search_client_type"] = args.get("search_client_type", "searxng")
    if name == EMAIL:
        kwargs["llm_as_a_judge"] = bool((item.get("reward_fn_args") or {}).get("llm_as_a_judge", True))
    if name == "agentscope_react_workflow":
        kind = args.get("type", "gsm8k")
        if kind not in TEMPLATE_TYPES:
            return None
        kwargs["type"] = kind
    kwargs["prompt_key"] = fmt.get("prompt_key", "prompt")  # Trinity-RFT's FormatConfig defaults
    kwargs["response_key"] = fmt.get("response_key", "response")
    kwargs["max_tokens"] = rollout_args.get("max_tokens") or DEFAULT_MAX_TOKENS
    return kwargs


def _evaluation(ctx: Context, prefix: str, name: str, source: str, function: str, kwargs: dict[str, Any], args: dict[str, Any]) -> None:
    """An evaluation taskset: validation runs the training stage's agent function with its kwargs."""
    trained = ctx.native_get("rollout.agent.function")
    trained_kwargs = ctx.native_get("rollout.agent.kwargs") or {}
    if trained != function:
        ctx.refuse(source, f"{name} in an evaluation taskset: posttrain validates with the training taskset's agent function "
                           f"(rollout.agent.function, now {trained!r}), so the training taskset must name the same workflow", None, name)
        return
    differ = {k: kwargs[k] for k in sorted(kwargs) if kwargs[k] != trained_kwargs.get(k)}
    earlier = ctx.native_get("rollout.agent.val_kwargs")
    if differ and earlier is not None and earlier != differ:
        ctx.refuse(source, f"{name} in a second evaluation taskset with other settings ({differ}) than the first's ({earlier}): "
                           "posttrain validates every evaluation row with one rollout.agent.val_kwargs", "rollout.agent.val_kwargs", differ)
        return
    if differ:
        ctx.set("rollout.agent.val_kwargs", differ, source, "the evaluation taskset's own settings, which its episodes use in "
                                                           "Trinity-RFT: validation's episodes run with them over rollout.agent.kwargs")
    else:
        ctx.drop(source, "validation runs the training stage's agent function, with the same settings, over the evaluation rows")
    for arg in args:
        if name == SEARCH and arg == "max_model_tokens":
            _max_model_tokens(ctx, f"{prefix}.workflow_args.{arg}", args[arg])
        else:
            ctx.drop(f"{prefix}.workflow_args.{arg}", "read into the evaluation's settings (rollout.agent.val_kwargs where they differ "
                                                      "from training's)" if arg in _AGENT_ARGS.get(name, ()) else
                     _UNREAD.get((name, arg), "as the training taskset's: validation uses the stage's rollout.agent"))


def _max_model_tokens(ctx: Context, key: str, value: Any) -> None:
    """The search workflow drops calls longer than this; posttrain trains every call, so only a bound no call reaches is accepted."""
    context = ctx.native_get("model.max_model_len") or ctx.get("model.max_model_len")
    if isinstance(value, int) and isinstance(context, int) and value >= context:
        ctx.drop(key, f"drops calls longer than {value} tokens, and none is: the model's context is {context} (model.max_model_len)")
    else:
        ctx.refuse(key, f"the search workflow drops calls longer than {value} tokens; posttrain trains every call an episode makes: "
                        f"accepted at or above the model's context (model.max_model_len, {context}), where no call is dropped", None, value)


def _entry(key: str, native: str, value: Any, reason: str):
    from posttrain.config.dialects.report import Entry

    return Entry(key, "translated", native, value, reason)
