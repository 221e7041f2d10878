"""AgentScope's ReAct agent solving a math task row, as a posttrain agent function.

Trinity-RFT trains AgentScope agents with two workflows that posttrain runs as built-in agent
functions (`rollout.agent.function`; docs/agentic.md "Built-in agents"), each episode one reply of
AgentScope's v1 `ReActAgent` (agentscope>=1.0.18,<2: the `agentscope` extra) whose model is an
`OpenAIChatModel` pointed at the episode's base URL, so every call it makes is recorded and trained:

- `template_agent` is Trinity-RFT's ``agentscope_react_workflow``: a prompt template chosen by
  ``type`` (only ``gsm8k`` exists, there and here), AgentScope's meta tool on
  (``enable_meta_tool``) and no other tool, at most 10 reasoning-acting iterations.
- `math_agent` is its ``agentscope_react_math_workflow``: one tool, ``execute_python_code``, and
  AgentScope's default of 10 iterations.

Both ask for a structured reply (a ``result`` string with the final answer boxed): the agent must
call AgentScope's ``generate_response`` tool with it. The reward is Trinity-RFT's
MathBoxedRewardFn on that string, computed by posttrain's ``math_boxed`` scorer
(posttrain.rewards.math_boxed) without the think check, as both workflows call it: accuracy (1.0
when the last boxed answer equals the truth after cleaning) + format_score (always 0.0: the
workflows pass ``with_think`` false, so the format coefficient of 0.1 never applies). The truth
is the row's ``response_key`` column, cut to the text after ``####`` when it holds one (a GSM8K
solution). No structured reply: `template_agent` scores the empty string (0.0), as Trinity's
template does; `math_agent` scores the text of the agent's final message, as Trinity's math
workflow does (it stringifies the message's content; posttrain takes its text).

Where posttrain differs, and why:

- The system prompts and the tool and field descriptions are posttrain's own words for the same
  instructions (answer in ``\\boxed{}``, Python may be run to compute or check).
- ``tool_choice`` "required" (AgentScope's ReActAgent asks for it while a structured reply is
  due) is sent as "auto": vLLM forces a tool call by constrained decoding, which posttrain's engines
  do not do (the endpoint refuses "required"). A reply without a tool call is then what AgentScope's
  loop already handles: it reminds the model to call ``generate_response`` and asks again, up to
  its iteration limit.
- ``execute_python_code`` runs the model's code in posttrain's sandbox (posttrain.sandbox: no
  network, CPU, memory, output and process limits) rather than as a plain subprocess of the
  trainer; it answers in AgentScope's format (``<returncode>..</returncode><stdout>..</stdout>
  <stderr>..</stderr>``) and honours the call's ``timeout`` up to AgentScope's default of 300 s.
- Sampling is the stage's (`rollout.temperature`, ...), as for every agent function; each call asks
  for ``max_tokens`` (Trinity-RFT's ``rollout_args.max_tokens``, else its 4096), capped by the
  endpoint at the response length.
"""

import asyncio
import functools
from dataclasses import dataclass
from typing import Any, Callable

from posttrain.config.dialects.trinity_agentscope import DEFAULT_MAX_TOKENS  # Trinity-RFT's per-call budget
from posttrain.rewards.math_boxed import math_boxed_score
from posttrain.sandbox import Limits, run_python

EXTRA = "pip install 'posttrain[agentscope]'"
CODE_TIMEOUT_S = 300.0  # AgentScope's execute_python_code default, the most a call may ask for
MAX_ITERS = 10  # reasoning-acting iterations of one reply (AgentScope's default; the template's too)

MATH_SYSTEM_PROMPT = (
    "You solve math problems and may use tools to do so. Work out the problem you are given; to compute "
    "something or to check your answer you can write Python code and run it. Give your final answer "
    "inside \\boxed{}."
)
RESULT_DESCRIPTION = "Your solution to the math problem, with the final answer written as \\boxed{...}, e.g. \\boxed{7}."
CODE_TOOL = {
    "type": "function",
    "function": {
        "name": "execute_python_code",
        "description": "Run a Python program and return its exit code, standard output and standard error. "
                       "Only what the program prints is returned.",
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python program to run."},
                "timeout": {"type": "number", "description": f"Seconds the program may run (at most {CODE_TIMEOUT_S:g}).",
                            "default": CODE_TIMEOUT_S},
            },
            "required": ["code"],
        },
    },
}


def gsm8k_truth(answer: Any) -> str:
    """The answer of a GSM8K solution (the text after ``####``), else the column as text.

    >>> gsm8k_truth("3 + 4 = 7\\n#### 7"), gsm8k_truth(12)
    ('7', '12')
    """
    if isinstance(answer, str) and "####" in answer:
        return answer.split("####")[1].strip()
    return str(answer)


def boxed_reward(result: str, truth: str) -> dict[str, float]:
    """Trinity-RFT's MathBoxedRewardFn as its AgentScope workflows call it (no think check):
    {"reward": accuracy + format_score, "accuracy", "format_score"}.

    >>> boxed_reward("So it is \\\\boxed{7}.", "7"), boxed_reward("7", "7")["reward"]
    ({'reward': 1.0, 'accuracy': 1.0, 'format_score': 0.0}, 0.0)
    """
    score = math_boxed_score("", result, truth, with_think=False)
    return {"reward": score["score"], "accuracy": score["accuracy"], "format_score": score["format_score"]}


@dataclass(frozen=True)
class Template:
    """One task type of `template_agent` (Trinity-RFT's TEMPLATE_MAP entry): its system prompt and
    how the truth is read from the row's answer column."""

    system_prompt: str
    truth: Callable[[Any], str]


TEMPLATES: dict[str, Template] = {"gsm8k": Template(MATH_SYSTEM_PROMPT, gsm8k_truth)}


async def template_agent(base_url: str, row: dict[str, Any], *, type: str = "gsm8k", prompt_key: str = "prompt",
                         response_key: str = "response", max_tokens: int = DEFAULT_MAX_TOKENS) -> dict[str, float]:
    """Trinity-RFT's agentscope_react_workflow (module docstring): the template of `type`, the
    question in the row's `prompt_key` column, the truth in its `response_key` column."""
    template = TEMPLATES.get(type)
    if template is None:
        raise ValueError(f"no AgentScope ReAct template for type {type!r}; posttrain has {sorted(TEMPLATES)}")
    question, truth = _columns(row, prompt_key, response_key)
    agent = _agent(base_url, template.system_prompt, max_tokens, code_tool=False, meta_tool=True)
    reply = await agent.reply(_as().Msg("user", question, role="user"), structured_model=_result_model())
    result = (reply.metadata or {}).get("result", "")
    return {**boxed_reward(result if isinstance(result, str) else str(result), template.truth(truth)),
            "react_memory_length": float(len(agent.memory.content))}


async def math_agent(base_url: str, row: dict[str, Any], *, prompt_key: str = "prompt", response_key: str = "response",
                     max_tokens: int = DEFAULT_MAX_TOKENS) -> dict[str, float]:
    """Trinity-RFT's agentscope_react_math_workflow (module docstring): the question in the row's
    `prompt_key` column, the truth in its `response_key` column, Python at hand."""
    question, truth = _columns(row, prompt_key, response_key)
    agent = _agent(base_url, MATH_SYSTEM_PROMPT, max_tokens, code_tool=True, meta_tool=False)
    reply = await agent.reply(_as().Msg("user", question, role="user"), structured_model=_result_model())
    return {**boxed_reward(reply_field(reply, "result"), gsm8k_truth(truth)), "react_memory_length": float(len(agent.memory.content))}


def reply_field(reply: Any, name: str) -> str:
    """The structured reply's field `name` as text, else the text of the agent's final message (as
    Trinity-RFT's workflows read a reply that did not come through generate_response)."""
    metadata = reply.metadata if isinstance(reply.metadata, dict) else {}
    return str(metadata[name]) if name in metadata else reply.get_text_content() or ""


def _columns(row: dict[str, Any], prompt_key: str, response_key: str) -> tuple[str, Any]:
    missing = [k for k in (prompt_key, response_key) if k not in row]
    if missing:
        raise KeyError(f"the row has no column {missing} (its columns: {sorted(row)}); the question is read from prompt_key "
                       f"{prompt_key!r} and the truth from response_key {response_key!r} (rollout.agent.kwargs)")
    return str(row[prompt_key]), row[response_key]


@functools.cache
def _as() -> Any:
    """The agentscope names used here, imported on first use (the package is an optional extra)."""
    try:
        from agentscope.agent import ReActAgent
        from agentscope.formatter import OpenAIChatFormatter
        from agentscope.memory import InMemoryMemory
        from agentscope.message import Msg, TextBlock
        from agentscope.model import OpenAIChatModel
        from agentscope.tool import Toolkit, ToolResponse
    except ImportError as e:
        raise ImportError(f"posttrain's AgentScope agents need the agentscope package (its v1 API, agentscope>=1.0.18,<2): "
                          f"{EXTRA} ({e})") from None

    class PolicyModel(OpenAIChatModel):
        """OpenAIChatModel asking "auto" where AgentScope asks "required" (module docstring)."""

        calls = 0  # the model calls this agent made (an episode's turns)

        async def __call__(self, messages: list[dict], tools: list[dict] | None = None, tool_choice: Any = None,
                           structured_model: Any = None, **kwargs: Any) -> Any:
            self.calls += 1
            choice = "auto" if tool_choice == "required" else tool_choice
            return await super().__call__(messages, tools=tools, tool_choice=choice, structured_model=structured_model, **kwargs)

    names = dict(ReActAgent=ReActAgent, OpenAIChatFormatter=OpenAIChatFormatter, InMemoryMemory=InMemoryMemory, Msg=Msg,
                 TextBlock=TextBlock, PolicyModel=PolicyModel, Toolkit=Toolkit, ToolResponse=ToolResponse)
    return type("AgentScope", (), names)


@functools.cache
def _result_model() -> Any:
    """The structured reply both workflows ask for: one ``result`` string."""
    from pydantic import BaseModel, Field

    class Result(BaseModel):
        result: str = Field(description=RESULT_DESCRIPTION)

    return Result


def _agent(base_url: str, system_prompt: str, max_tokens: int | None, code_tool: bool, meta_tool: bool,
           max_iters: int = MAX_ITERS, name: str = "react_agent", toolkit: Any = None) -> Any:
    """A fresh ReActAgent whose model calls the episode's endpoint (its own memory: one episode);
    `max_tokens` None asks no budget (the endpoint's: the response length); `toolkit` holds the
    agent's own tools (a fresh one by default)."""
    a = _as()
    kwargs = {"max_tokens": int(max_tokens)} if max_tokens else {}
    model = a.PolicyModel(model_name="policy", api_key="EMPTY", stream=False, generate_kwargs=kwargs,
                          client_kwargs={"base_url": base_url, "max_retries": 0})
    toolkit = toolkit if toolkit is not None else a.Toolkit()
    if code_tool:
        toolkit.register_tool_function(execute_python_code, json_schema=CODE_TOOL)
    agent = a.ReActAgent(name=name, sys_prompt=system_prompt, model=model, formatter=a.OpenAIChatFormatter(),
                         toolkit=toolkit, memory=a.InMemoryMemory(), enable_meta_tool=meta_tool, max_iters=max_iters)
    agent.set_console_output_enabled(False)  # episodes run by the hundred: no printing of every message
    return agent


async def execute_python_code(code: str, timeout: float = CODE_TIMEOUT_S) -> Any:
    """The math agent's tool: `code` in posttrain's sandbox for at most `timeout` seconds (capped at
    CODE_TIMEOUT_S), answered as AgentScope's tool of the same name answers."""
    seconds = min(max(float(timeout), 1.0), CODE_TIMEOUT_S)
    run = await asyncio.to_thread(run_python, code, "", Limits(cpu_s=seconds, wall_s=seconds))
    status, stderr = run.returncode, run.stderr
    if run.limit == "wall":
        status, stderr = -1, (stderr + "\n" if stderr else "") + f"TimeoutError: the code ran longer than {seconds:g} seconds."
    elif run.limit == "output":
        stderr = (stderr + "\n" if stderr else "") + "the code printed more output than the sandbox allows and was stopped."
    a = _as()
    text = f"<returncode>{status}</returncode><stdout>{run.stdout}</stdout><stderr>{stderr}</stderr>"
    return a.ToolResponse(content=[a.TextBlock(type="text", text=text)])
