"""`tool_wrapper`: text tools a `custom_envs` entry lends the model, around any environment.

ROLL's agentic examples wrap an environment (often a one-action `roll_math` / `roll_qa`) so the
model may run code or search before it answers:

    custom_envs:
      dapo_with_code:
        env_type: roll_math
        env_config: {dataset_name: dapo.parquet}
        tool_wrapper:
          wrapper_args: {tool_reward: 0, tool_success_reward: 0.1, max_tool_uses: 1}
          tool_configs:
            - {tool_id: python_code, tool_args: {timeout: 5}}

How an action is handled (GEM's tool wrapper, which ROLL uses):

- While fewer than ``max_tool_uses`` calls were made (default 10; null: no limit), each tool in
  order reads the action; the first that finds its call *and* runs it without error stops the search.
  If none did, the **last** tool tried decides: when it found a call (which failed), that failed call
  counts as the tool call; otherwise the action goes to the environment.
- A tool call is not the end of the episode: the reward is ``tool_reward``, plus
  ``tool_success_reward`` when it ran without error (or, instead, the negative
  ``tool_execute_error_reward`` when it failed), and the tool's answer comes back as a ``tool``
  message (ROLL renders it so, not through the entry's agent_template). The call that reaches the
  limit gets a note asking for the final answer.
- Otherwise the action is the environment's; its reward, end and info are the step's.
- The first observation is the environment's, then a new line and each tool's instructions (under
  "Available tools:" when there are several).

Tools (``tool_id``):

- ``python_code``: the code of the action's first ``<code>...</code>`` or fenced python block (or
  ``patterns``: regular expressions whose group 1 is the code; the one that ends first wins) runs in
  posttrain's sandbox (posttrain.sandbox: no network, CPU/memory/time limits) with ``timeout``
  seconds. Its answer is ``Code execution result: `` and what it printed, then stderr (its last line
  with ``keep_error_last_line``). A non-zero exit, a time-out or no output at all is an error. Code
  that fails on an undefined name runs once more after a prelude of common standard-library imports.
  ``sandbox_type`` (none or bwrap) is accepted: posttrain's sandbox isolates either way.
- ``search``: the query of the action's first ``<search>...</search>`` goes to a retrieval server
  (``search_url``, else the SEARCH_URL environment variable): a POST of the msgpack map
  {query, topk, return_scores: true}, whose answer's ``result`` lists documents; the tool answers
  ``<information>`` with ``Doc i(Title: first line) rest`` per document. A server error is the
  tool's answer (and an error), as in GEM; the episode goes on.
- ``mcp`` is refused when a manager plays the entry (MCP servers' tools are reached through
  ``rollout.multi_turn`` tool configs instead).
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

TOOL_LIMIT_NOTE = "\n\nYou have used every tool call this question allows; write your final answer now."
# Tried once more with these names defined when the code fails on an undefined name (models often
# use a standard-library function without importing it).
PRELUDE = ("import math, itertools, collections, functools, heapq, bisect, string, fractions, statistics, re\n"
           "from math import *\nfrom itertools import *\nfrom collections import *\nfrom fractions import Fraction\n"
           "from functools import reduce, lru_cache\n")


@dataclass(frozen=True)
class ToolAnswer:
    """What one tool made of an action: whether it found its call, whether running it failed, its answer."""

    found: bool
    error: bool
    text: str


class PythonCodeTool:
    """Runs the action's code block in the sandbox."""

    def __init__(self, timeout: float = 5, sandbox_type: str = "none", keep_error_last_line: bool = False,
                 tool_instruction: str | None = None, patterns: Sequence[str] | None = None):
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout: seconds > 0, got {timeout!r}")
        if sandbox_type not in ("none", "bwrap"):
            raise ValueError(f"sandbox_type: none or bwrap, got {sandbox_type!r}")
        self.timeout, self.keep_error_last_line = float(timeout), bool(keep_error_last_line)
        self.patterns = [re.compile(p, re.DOTALL) for p in (patterns or (r"<code>(.*?)</code>", r"```\n?python(.*?)```"))]
        self.text = tool_instruction or (
            "You can run Python to check a calculation while you reason: put a complete program (its imports "
            "included, results printed with print) between <code> and </code>; it runs in a sandbox and its "
            "output comes back to you. Keep reasoning step by step, and use code where it makes a step faster "
            "or more exact.")

    def instruction(self) -> str:
        return self.text

    def answer(self, action: str) -> ToolAnswer:
        matches = [m for m in (p.search(action) for p in self.patterns) if m]
        if not matches:
            return ToolAnswer(False, True, "")
        code = min(matches, key=lambda m: m.end()).group(1).strip()  # the block that ends first
        ok, out, err = self._run(code)
        if not ok and "is not defined" in err:
            ok, out, err = self._run(PRELUDE + code)
        if err and self.keep_error_last_line:
            err = err.split("\n")[-1]
        text = (f"{out}\n{err}" if err else out).lstrip(" \n")
        return ToolAnswer(True, not ok or not text, f"Code execution result: {text}\n")

    def _run(self, code: str) -> tuple[bool, str, str]:
        from posttrain.sandbox import Limits, run_python

        result = run_python(code, limits=Limits(cpu_s=self.timeout, wall_s=self.timeout))
        err = result.stderr.strip()
        if result.limit == "wall":
            err = f"{err}\nExecution timed out after {self.timeout:g} seconds.".strip()
        return result.ok, result.stdout, err


class SearchTool:
    """Sends the action's <search> query to a retrieval server."""

    def __init__(self, search_url: str | None = None, topk: int = 3, timeout: float = 5, num_workers: int = 1):
        self.url = search_url or os.environ.get("SEARCH_URL")
        if not self.url:
            raise ValueError("search_url: required (the retrieval server's URL), or set the SEARCH_URL environment variable")
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk: an integer >= 1, got {topk!r}")
        if importlib.util.find_spec("msgpack") is None:  # the retrieval server speaks msgpack
            raise ValueError("search_url: the search tool needs the msgpack package: pip install 'posttrain[envs]'")
        self.topk, self.timeout = topk, float(timeout)

    def instruction(self) -> str:
        return ("A search engine can help with this question. When your reasoning in <think> ... </think> finds that "
                "you lack a fact, say what you need, then search for it by writing <search> your query </search>; "
                "the results come back inside <information> ... </information>. Think and search as often as you "
                "need, and give the final answer as <answer> ... </answer>.")

    def answer(self, action: str) -> ToolAnswer:
        found = re.search(r"<search>(.*?)</search>", action, re.DOTALL)
        if not found:
            return ToolAnswer(False, True, "")
        result = self.search(found.group(1).strip())
        return ToolAnswer(True, result.startswith("[SearchTool Error:"), f"\n\n<information>{result}</information>\n\n")

    def search(self, query: str) -> str:
        """The documents as text, or the error as text (the model sees either)."""
        import urllib.request

        import msgpack

        body = msgpack.packb({"query": query, "topk": self.topk, "return_scores": True})
        request = urllib.request.Request(self.url, data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                docs = msgpack.unpackb(response.read())["result"]
            return "".join(_doc_line(i, doc) for i, doc in enumerate(docs))
        except Exception as e:  # noqa: BLE001  (any failure is the tool's answer, as in GEM)
            return f"[SearchTool Error: {e}]"


def _doc_line(i: int, doc: dict[str, Any]) -> str:
    title, _, text = doc["document"]["contents"].partition("\n")
    return f"Doc {i + 1}(Title: {title}) {text}\n"


TOOLS = {"python_code": PythonCodeTool, "search": SearchTool}
REFUSED = {"mcp": "ROLL's MCP tool wrapper is not provided: reach an MCP server's tools as function calls "
                  "through rollout.multi_turn.tool_config_path (docs/agentic.md)"}
WRAPPER_ARGS = ("tool_reward", "tool_success_reward", "tool_execute_error_reward", "max_tool_uses")


@dataclass(frozen=True)
class ToolWrapping:
    """A checked `tool_wrapper` entry: the tools to build for each env, and the rewards."""

    tools: tuple[tuple[str, dict[str, Any]], ...]  # (tool_id, tool_args) in order
    tool_reward: float = 0.0
    tool_success_reward: float = 0.0
    tool_execute_error_reward: float = 0.0
    max_tool_uses: float = 10  # inf: no limit

    def refused(self, key: str) -> list[str]:
        """The problems of tools posttrain does not provide (only reported for the entries a manager plays)."""
        return [f"{key}.tool_configs[{i}].tool_id: {tool_id}: not supported: {REFUSED[tool_id]}"
                for i, (tool_id, _) in enumerate(self.tools) if tool_id in REFUSED]

    def wrap(self, env: Any) -> "ToolEnv":
        return ToolEnv(env, [TOOLS[tool_id](**args) for tool_id, args in self.tools], self)


def parse_tool_wrapper(value: Any, key: str) -> tuple[ToolWrapping | None, list[str]]:
    """The entry's `tool_wrapper`, or the problems with it."""
    if not isinstance(value, dict) or set(value) - {"wrapper_args", "tool_configs"}:
        return None, [f"{key}: a mapping of wrapper_args and tool_configs, got {value!r:.80}"]
    args = value.get("wrapper_args") or {}
    problems = [f"{key}.wrapper_args.{k}: unknown; it takes {list(WRAPPER_ARGS)}" for k in args if k not in WRAPPER_ARGS]
    numbers = {k: args.get(k, 0.0) for k in WRAPPER_ARGS[:3]}
    problems += [f"{key}.wrapper_args.{k}: a number, got {v!r}" for k, v in numbers.items()
                 if isinstance(v, bool) or not isinstance(v, (int, float))]
    limit = args.get("max_tool_uses", 10)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        problems.append(f"{key}.wrapper_args.max_tool_uses: an integer >= 0 or null (no limit), got {limit!r}")
    if not problems and numbers["tool_execute_error_reward"] != 0 and (
            numbers["tool_execute_error_reward"] > 0 or numbers["tool_reward"] or numbers["tool_success_reward"]):
        problems.append(f"{key}.wrapper_args.tool_execute_error_reward: a failed call's reward replaces the others, so it must be "
                        "negative with tool_reward and tool_success_reward 0")
    configs = value.get("tool_configs") or []
    if not isinstance(configs, list) or not configs:
        problems.append(f"{key}.tool_configs: a list of {{tool_id, tool_args}}, at least one")
        configs = []
    tools = []
    for i, config in enumerate(configs):
        where = f"{key}.tool_configs[{i}]"
        tool_id = config.get("tool_id") if isinstance(config, dict) else None
        tool_args = dict(config.get("tool_args") or {}) if isinstance(config, dict) else {}
        if tool_id not in TOOLS and tool_id not in REFUSED:
            problems.append(f"{where}.tool_id: {tool_id!r} is not a text tool; posttrain has {sorted(TOOLS)}")
            continue
        if tool_id in TOOLS:
            problems += _check_args(tool_id, tool_args, where)
        tools.append((tool_id, tool_args))
    if problems:
        return None, problems
    return ToolWrapping(tuple(tools), *(float(numbers[k]) for k in WRAPPER_ARGS[:3]),
                        float("inf") if limit is None else limit), []


def _check_args(tool_id: str, tool_args: dict[str, Any], where: str) -> list[str]:
    """Build the tool once, so a bad argument is a config problem now rather than at the first episode."""
    try:
        TOOLS[tool_id](**tool_args)
    except TypeError as e:
        return [f"{where}.tool_args: {e}"]
    except ValueError as e:
        return [f"{where}.tool_args.{e}"]
    return []


class ToolEnv:
    """An environment with text tools in front of it (the module docstring)."""

    def __init__(self, env: Any, tools: list[Any], wrapping: ToolWrapping):
        self.env, self.tools, self.wrapping = env, tools, wrapping
        self.instruction = getattr(env, "instruction", "")
        self.calls = 0

    def __getattr__(self, name: str) -> Any:  # the inner env's optional methods (state, expert_action)
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, seed: int) -> str:
        self.calls = 0
        text = "\n".join(tool.instruction() for tool in self.tools)
        if len(self.tools) > 1:
            text = f"Available tools:\n{text}"
        return f"{self.env.reset(seed=seed)}\n{text}"

    def step(self, action_text: str) -> tuple[Any, float, bool, dict[str, Any]]:
        w, answer = self.wrapping, ToolAnswer(False, True, "")
        if self.calls < w.max_tool_uses:
            for tool in self.tools:
                answer = tool.answer(action_text)
                if answer.found and not answer.error:
                    break
        if not answer.found:
            return self.env.step(action_text)
        self.calls += 1
        text = answer.text + (TOOL_LIMIT_NOTE if self.calls == w.max_tool_uses else "")
        if answer.error and w.tool_execute_error_reward:
            reward = w.tool_execute_error_reward
        else:
            reward = w.tool_reward + (0.0 if answer.error else w.tool_success_reward)
        return [{"role": "tool", "content": text}], reward, False, {"action_is_valid": True, "tool_calls": self.calls}
