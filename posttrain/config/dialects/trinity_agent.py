"""posttrain's agent-function workflow in a Trinity-RFT file: ``posttrain_agent_workflow``.

Trinity-RFT trains an agent written against an OpenAI client by turning on the rollout model's
OpenAI server (``explorer.rollout_model.enable_openai_api``) and its call history
(``enable_history``), whose recorded calls the workflow returns as experiences. posttrain's
counterpart is an agent function (`rollout.agent`, docs/agentic.md "Agent functions"): a taskset
whose workflow is ``posttrain_agent_workflow`` with ``workflow_args: {function: my_agent.py:run}``
(and optionally ``max_concurrency``, ``timeout``, ``failure_penalty``, ``max_failure_rate``) runs
that function on every task row against a loopback endpoint that records every call. With it,
``enable_openai_api`` and ``enable_history`` true are what posttrain does and are accepted; false
is refused (the function needs the endpoint, and its recorded calls are the training rows). Trinity's
own workflow classes still need Trinity and are refused where they are named
(posttrain.config.dialects.trinity_workflows).

The rollout model's OpenAI-server options for tool calling and reasoning (Trinity hands them to
vLLM's server as ``--enable-auto-tool-choice``, ``--tool-call-parser``, ``--reasoning-parser``)
become the endpoint's ``rollout.agent.enable_auto_tool_choice``, ``tool_call_parser`` and
``reasoning_parser`` beside an agent-function workflow; a parser posttrain does not implement is
refused naming the ones it does. A file that leaves them out gets posttrain's defaults (hermes, auto
tool choice on, no reasoning parser), not Trinity's (off). With any other workflow there is no
endpoint: Trinity's defaults (off, none) are accepted and anything else refused. A step-wise
environment workflow (``step_wise_alfworld_workflow``) needs ``enable_history`` true, as in
Trinity-RFT, and is accepted with it: its turns are posttrain's turn rows.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_envs import WORKFLOWS, env_workflow_of
from posttrain.config.tables import Rule

AGENT = "posttrain_agent_workflow"
ARGS = ("function", "max_concurrency", "timeout", "failure_penalty", "max_failure_rate")
SERVER_KEYS = ("explorer.rollout_model.enable_openai_api", "explorer.rollout_model.enable_history")
_ELSEWHERE = ("Trinity-RFT's OpenAI server and call history serve its workflow classes, which do not run in posttrain; an agent "
              f"written against an OpenAI client runs as posttrain's agent function: name the taskset workflow {AGENT} with "
              "workflow_args.function (rollout.agent.function), and then true is accepted")
_NO_REWARD = (f"{AGENT}'s function returns each episode's reward and calls no reward function: score inside the "
              "function (it gets the row, ground truth included) and remove the reward function")


def agent_workflow(ctx: Context, prefix: str, source: str, args: dict[str, Any], training: bool, reward_keys: list[str]) -> None:
    """One taskset naming posttrain_agent_workflow: its workflow_args to rollout.agent.*, its reward
    function refused, an evaluation taskset accepted when the training one runs the same function."""
    for key in reward_keys:
        ctx.refuse(key, _NO_REWARD, None, ctx.get(key))
    if not training:
        trained = ctx.native.get("rollout", {}).get("agent", {}).get("function")
        if trained is None or args.get("function", trained) != trained:
            ctx.refuse(source, f"{AGENT} in an evaluation taskset: posttrain validates with the training taskset's agent function "
                               "(rollout.agent.function), so the training taskset must name the same one", None, AGENT)
        else:
            ctx.drop(source, "validation runs the training stage's agent function over the evaluation rows")
            for arg in args:
                ctx.drop(f"{prefix}.workflow_args.{arg}", "as the training taskset's: validation uses the stage's rollout.agent")
        return
    if "function" not in args:
        ctx.refuse(source, f"{AGENT} needs workflow_args.function: your agent as 'module:function' or 'path/to/file.py:function'", None, AGENT)
        return
    ctx.set("rollout.agent.function", args["function"], source, "the agent function run on every task row (rollout.agent)")
    for arg, value in args.items():
        if arg == "function":
            continue
        if arg in ARGS:
            ctx.set(f"rollout.agent.{arg}", value, f"{prefix}.workflow_args.{arg}")
        else:
            ctx.refuse(f"{prefix}.workflow_args.{arg}", f"{AGENT} takes the workflow_args {list(ARGS)} (rollout.agent.*)", None, value)


def server_keys(ctx: Context) -> None:
    """enable_openai_api / enable_history: true beside an agent-function workflow, false elsewhere
    (serve mode's enable_openai_api is the explorer's: trinity_explorer.engines)."""
    agent = ctx.native.get("rollout", {}).get("agent", {}).get("function") is not None
    for key in SERVER_KEYS:
        if not ctx.has(key) or key in ctx.handled:
            continue
        ctx.consume(key)
        value = ctx.get(key)
        if not agent and key.endswith("enable_history") and step_wise(ctx):
            if value is True:
                ctx.drop(key, f"{step_wise(ctx)} needs the call history for its per-call experiences: posttrain's agent loop keeps every "
                              "turn and cuts the episodes into turn rows (env.train_rows turn)")
            else:
                ctx.refuse(key, f"{step_wise(ctx)} reads its experiences from the call history, and Trinity-RFT stops without it: "
                                "set true (posttrain's turn rows need nothing more)", None, value)
        elif not agent:
            if value is False:
                ctx.drop(key, "false: no OpenAI server and no call history, as posttrain's rollout paths need none")
            else:
                ctx.refuse(key, _ELSEWHERE, None, value)
        elif value is True:
            ctx.drop(key, "an agent-function workflow: the agent function always calls a loopback OpenAI-compatible endpoint of the policy, which records "
                          "every call as a training row (rollout.agent)")
        else:
            ctx.refuse(key, f"{AGENT} runs the agent function against the policy's OpenAI-compatible endpoint and trains on its recorded "
                            "calls; set true (as Trinity-RFT needs for an OpenAI-client workflow) or remove it", None, value)


def step_wise(ctx: Context) -> str | None:
    """The training taskset's step-wise environment workflow (one experience per model call), if any."""
    workflow = env_workflow_of(ctx)
    return next((name for name, w in WORKFLOWS.items() if w is workflow), None) if workflow and workflow.turn_rows else None


_RM = "explorer.rollout_model"
# Trinity's key -> (posttrain's key, the values posttrain implements, Trinity's default)
PARSER_KEYS: dict[str, tuple[str, tuple[Any, ...], Any]] = {
    f"{_RM}.enable_auto_tool_choice": ("rollout.agent.enable_auto_tool_choice", (True, False), False),
    f"{_RM}.tool_call_parser": ("rollout.agent.tool_call_parser", ("hermes", None), None),
    f"{_RM}.reasoning_parser": ("rollout.agent.reasoning_parser", ("deepseek_r1", "qwen3", None), None),
}


def parser_keys(ctx: Context) -> None:
    """enable_auto_tool_choice / tool_call_parser / reasoning_parser: the agent endpoint's, beside an
    agent-function workflow; elsewhere Trinity's default is accepted and anything else refused."""
    agent = ctx.native.get("rollout", {}).get("agent", {}).get("function") is not None
    for key, (target, known, default) in PARSER_KEYS.items():
        if not ctx.has(key) or key in ctx.handled:
            continue
        ctx.consume(key)
        value = ctx.get(key)
        if not agent:
            if value == default:
                ctx.drop(key, f"{default}: Trinity-RFT's default, no tool-call or reasoning parsing, as posttrain's rollout paths do none")
            else:
                ctx.refuse(key, "tool calls and reasoning are parsed on the OpenAI-compatible endpoint of posttrain's agent function "
                                f"(rollout.agent); name the taskset workflow {AGENT} with workflow_args.function, or remove it", None, value)
        elif value in known:
            ctx.set(target, value, key, "the agent function's endpoint answers as vLLM's OpenAI server with this setting")
        else:
            names = ", ".join(str(k) for k in known if k is not None and k is not True and k is not False)
            ctx.refuse(key, f"{value!r} is not a parser posttrain implements on the agent endpoint (it has: {names}; null: none)", target, value)


_TS = "buffer.explorer_input.taskset"
_WITH_AGENT = ((f"{_TS}.path", "org/dataset"), (f"{_TS}.default_workflow_type", AGENT), (f"{_TS}.workflow_args", {"function": "my_agent.py:run"}))
# Keys this module translates (docs/config-mapping.md reads this table: posttrain.config.tables).
RULES: dict[str, Rule] = {
    **{key: Rule(None, f"with a taskset workflow {AGENT} (posttrain's agent function, rollout.agent): true is what posttrain does "
                       "(a loopback OpenAI-compatible endpoint of the policy that records every call as a training row), false is "
                       "refused; with any other workflow false is accepted and true refused (Trinity's workflow classes do not run in posttrain); "
                       "enable_openai_api in mode serve: the serve endpoint", True, _WITH_AGENT)
       for key in SERVER_KEYS},
    **{key: Rule(target, f"with a taskset workflow {AGENT}: the agent endpoint's {target.rpartition('.')[2]} (values "
                         f"{', '.join(map(str, known))}; others refused); with any other workflow only Trinity's default "
                         f"{default} is accepted", "hermes" if "tool_call_parser" in key else True if "auto" in key else "qwen3", _WITH_AGENT)
       for key, (target, known, default) in PARSER_KEYS.items()},
}
