"""AgentScope's ReAct agent searching the web for a question's answer, as a posttrain agent function.

Trinity-RFT's ``agentscope_v1_react_search_workflow`` (its ``agentscope_websearch`` example) trains
an AgentScope v1 `ReActAgent` that answers one question per taskset row with a web-search tool and
is rewarded by a judge model. `search_agent` is that episode:

- **The search tool** comes from an MCP server the agent starts as a child process and speaks to
  over stdio: ``search_client_type`` ``tavily`` runs Tavily's server (``npx -y tavily-mcp@latest``,
  which reads TAVILY_API_KEY) and ``searxng`` a SearXNG one (``npx -y mcp-searxng``, which reads
  SEARXNG_URL), as the workflow does; ``search_command`` (posttrain's) runs another MCP server
  instead, e.g. a local retrieval service. Every tool the server lists is registered with the agent.
  `check_kwargs` refuses a missing variable before the run starts (the workflow fails each episode).
- **The agent** has a web-research system prompt (in posttrain's words), no other tool, at most
  ``max_turns`` reasoning-acting iterations (10), and is asked for a structured reply: one
  ``result`` string, its final answer. Its model is an `OpenAIChatModel` at the episode's base URL
  asking ``max_tokens`` per call (``rollout_args.max_tokens``, else 4096).
- **The reward** is 1 when the judge says the answer matches the row's answer, else 0: the stage's
  auxiliary model ``judge`` (reward.auxiliary_models.judge; Trinity-RFT's first auxiliary model) is
  shown the question, the agent's result and the reference answer and asked for its reasoning and
  a YES/NO correctness line; the reward is 1 when ``Correctness`` is followed by ``YES`` (any case).
  No structured reply scores the text of the agent's last message, as the workflow does. A failed
  search session or judge call scores 0 (the episode's calls are still trained), as in the workflow.
- ``max_model_tokens``: the workflow drops calls longer than this many tokens. posttrain trains
  every call, so the setting is accepted only where no call can reach it (at least the model's
  context, ``model.max_model_len``: the dialect checks it).

Returned metrics: ``react_turns`` (the agent's memory length / 2), ``judge_error``, ``agent_error``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from typing import Any

from posttrain.agents.agentscope_react import _agent, _as, _columns, reply_field
from posttrain.rewards.auxiliary import chat

SYSTEM_PROMPT = ("You are an expert at finding information on the web. Search as thoroughly as the question needs, "
                 "check what you find, and answer the question accurately.")
RESULT_DESCRIPTION = "The final answer to the question you were asked."
# the MCP server each client type starts, and the environment variable it needs (the workflow's)
CLIENTS = {"tavily": (["npx", "-y", "tavily-mcp@latest"], "TAVILY_API_KEY"),
           "searxng": (["npx", "-y", "mcp-searxng"], "SEARXNG_URL")}
JUDGE_PROMPT = """Decide whether the [response] to the [question] is correct, given the [correct_answer].

[question]: {question}

[response]: {response}

[correct_answer]: {answer}

Answer in two parts:

1. **Reasoning**: say why the response matches the correct answer or not. Only compare the two answers: do not
solve the question yourself, and do not argue for an answer other than the correct one.

2. **Correctness**: write exactly "YES" if the response gives the correct answer (numbers within a small margin,
text up to small differences of form such as a hyphen), and exactly "NO" otherwise: when anything differs, is
ambiguous or is wrong.
"""


def check_kwargs(kwargs: dict[str, Any], key: str = "rollout.agent.kwargs") -> list[str]:
    """Problems with the agent's settings (`key`: where they are set) on this machine, before the run starts."""
    client = kwargs.get("search_client_type", "searxng")
    if client not in CLIENTS:
        return [f"{key}.search_client_type: {client!r}; the search agent runs {sorted(CLIENTS)} (or give search_command)"]
    if kwargs.get("search_command"):
        return []
    variable = CLIENTS[client][1]
    if not os.environ.get(variable):
        return [f"{key}.search_client_type: {client} searches through an MCP server that reads the environment "
                f"variable {variable}, and the environment variable {variable} is not set: export it"]
    return []


def judged_correct(verdict: str) -> bool:
    """The judge said YES on its correctness line.

    >>> judged_correct("1. Reasoning: same.\\n2. **Correctness**: YES"), judged_correct("Correctness: no")
    (True, False)
    """
    return re.search(r"Correctness.*?YES", verdict, re.IGNORECASE | re.DOTALL) is not None


async def search_agent(base_url: str, row: dict[str, Any], *, prompt_key: str = "problem", response_key: str = "answer",
                       max_turns: int = 10, search_client_type: str = "searxng", search_command: list[str] | None = None,
                       max_tokens: int | None = 4096, judge: str = "judge", judge_max_tokens: int = 1024) -> dict[str, float]:
    """One question answered by the search agent and judged (module docstring)."""
    question, truth = _columns(row, prompt_key, response_key)
    command = list(search_command or CLIENTS[search_client_type][0])
    if shutil.which(command[0]) is None:
        raise RuntimeError(f"the search agent's MCP server runs {command[0]!r}, which is not installed here "
                           f"({' '.join(command)}; npx comes with Node.js: apt-get install nodejs npm)")
    a = _as()
    from agentscope.mcp import StdIOStatefulClient
    from pydantic import BaseModel, Field

    class Result(BaseModel):
        result: str = Field(description=RESULT_DESCRIPTION)

    agent = _agent(base_url, SYSTEM_PROMPT, max_tokens, code_tool=False, meta_tool=False, max_iters=max_turns, name="search_agent")
    variable = CLIENTS.get(search_client_type, (None, None))[1]
    env = {**os.environ} if search_command else {"PATH": os.environ.get("PATH", ""), variable: os.environ.get(variable, "")}
    client = StdIOStatefulClient(name=f"{search_client_type}_mcp", command=command[0], args=command[1:], env=env)
    reply, agent_error = None, False
    try:
        await client.connect()
        await agent.toolkit.register_mcp_client(client)
        reply = await agent.reply(a.Msg("user", question, role="user"), structured_model=Result)
    except Exception:  # noqa: BLE001 - the workflow scores a failed session 0 and keeps its calls
        agent_error = True
    finally:
        if client.is_connected:
            await client.close()
    answer = None if reply is None else reply_field(reply, "result")  # no reply: the session failed, nothing to judge
    correct, judge_error = False, False
    if answer is not None:
        prompt = JUDGE_PROMPT.format(question=question, response=answer, answer=truth)
        messages = [{"role": "system", "content": "You judge whether answers are correct."}, {"role": "user", "content": prompt}]
        try:
            verdict = await asyncio.to_thread(chat, judge, messages, max_tokens=judge_max_tokens)
            correct = judged_correct(verdict)
        except Exception:  # noqa: BLE001 - a failed judge call scores 0, as in the workflow
            judge_error = True
    return {"reward": float(correct), "react_turns": float(len(agent.memory.content) // 2),
            "judge_error": float(judge_error), "agent_error": float(agent_error)}


search_agent.check_kwargs = check_kwargs  # type: ignore[attr-defined]  (read by posttrain.trainer.agent_fn)
