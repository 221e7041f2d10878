"""`openreward_env`: the tasks of an OpenReward environment, one session per episode (prompt_mode messages).

An OpenReward environment serves tasks (by split and index) and tools; a session holds one task's
state, gives its prompt, and answers tool calls with text, and at times a reward and "finished".
The `openreward` package's client talks to it: a hosted environment (``owner/name``, with the
``OPENREWARD_API_KEY`` of the user's account) or a server of one's own (``OPENREWARD_SESSION_URL``).
ROLL plays these with its AgentNativeStepEnvManager; this environment does the same here:

- reset(seed): a session on task ``seed % num_tasks`` of the split (opened with retries, the wait
  doubling from ``retry_backoff_seconds``); the conversation starts with the task's prompt as the
  user message, and `tools()` gives the session's tools for the chat template to write (there is no
  system message of ours: the template writes the tools where the model was trained to read them).
- step(text): the model's text becomes the assistant message; its first ``<tool_call>`` block is
  parsed (the ``<function=NAME><parameter=KEY>VALUE</parameter></function>`` form of Qwen's newer
  templates, else JSON ``{"name": ..., "arguments": {...}}``) and called on the session, whose text
  answer follows as a user message wrapped in ``<tool_response>`` tags. A text with no tool call, or
  one that does not parse, gets a user message saying so (``action_is_valid`` False, so the entry's
  format_penalty applies: 0 unless set, as in ROLL); a tool that raises answers with its error.
- Rewards: the session's rewards of the episode are reduced (``reward_reduction``: sum, mean, max or
  min) into one, given on the step that ends it: the tool call that finishes the task, or the
  ``max_steps``-th action, which adds ``nonterminal_reward`` (when set) to the reduction first.
  Every other step's reward is 0. ``success`` is whether any session reward was positive.

ROLL asks the model for one more action after the ``max_steps``-th and puts the final reward there
without running it; here it lands on the ``max_steps``-th action itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from typing import Any

from posttrain.envs.registry import register_env

REDUCTIONS = {"sum": sum, "mean": lambda r: sum(r) / len(r), "max": max, "min": min}
_FUNCTION = re.compile(r"<function=(?P<name>[^>]+)>(?P<body>.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=(?P<key>[^>]+)>\s*(?P<value>.*?)\s*</parameter>", re.DOTALL)
NO_CALL = "Your reply has no tool call. Call one of the tools in a <tool_call>...</tool_call> block to work on the task."


def parse_tool_call(text: str) -> tuple[str, dict[str, Any]] | str | None:
    """The first ``<tool_call>`` block of `text` as (name, arguments); a str saying why it does not
    parse; None when there is no block."""
    start = text.find("<tool_call>")
    if start == -1:
        return None
    end = text.find("</tool_call>", start)
    inner = text[start + len("<tool_call>"): end if end != -1 else len(text)].strip()
    if not inner:
        return "the <tool_call> block is empty"
    found = _FUNCTION.search(inner)
    if found:  # Qwen's XML form: every parameter value is text
        return found["name"].strip(), {m["key"].strip(): m["value"].strip() for m in _PARAMETER.finditer(found["body"])}
    try:
        call = json.loads(inner)
    except json.JSONDecodeError as e:
        return f"not JSON ({e})"
    if not isinstance(call, dict) or not call.get("name"):
        return "expected an object with a name and arguments"
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        return f"the arguments are a {type(arguments).__name__}, not an object"
    return str(call["name"]), arguments


@register_env("openreward_env")
class OpenRewardEnv:
    """An OpenReward environment's tasks over its client (see the module docstring)."""

    def __init__(self, environment_name: str, split: str = "train", mode: str = "train", max_steps: int = 16,
                 reward_reduction: str = "sum", nonterminal_reward: float | None = None, retry_max_attempts: int = 3,
                 retry_backoff_seconds: float = 5.0):
        if reward_reduction not in REDUCTIONS:
            raise ValueError(f"reward_reduction: {reward_reduction!r}; choose one of {list(REDUCTIONS)}")
        self.name, self.split, self.max_steps = environment_name, split, max_steps
        self.reduction, self.nonterminal_reward = reward_reduction, nonterminal_reward
        self.attempts, self.backoff = retry_max_attempts, retry_backoff_seconds
        self.mode = mode  # ROLL's train/val label; the split chooses the tasks
        from openreward import OpenReward

        self.environment = OpenReward().environments.get(name=environment_name)  # the key and URLs come from the environment
        self.num_tasks: int | None = None
        self.session: Any = None
        self.messages: list[dict[str, str]] = []
        self.rewards: list[float] = []
        self.steps = 0
        self._tools: list[dict[str, Any]] = []

    @staticmethod
    def check_data(env_config: dict[str, Any]) -> None:
        """At plan time: the client package is installed, and a hosted environment has its key."""
        if importlib.util.find_spec("openreward") is None:
            raise ValueError("openreward_env needs the openreward package: pip install 'posttrain[openreward]'")
        name = str(env_config.get("environment_name", ""))
        if "/" in name and not os.environ.get("OPENREWARD_API_KEY"):
            raise ValueError(f"environment variable OPENREWARD_API_KEY is not set: the hosted environment {name} needs your "
                             "OpenReward key (or point OPENREWARD_SESSION_URL at a server of your own)")

    def tools(self) -> list[dict[str, Any]]:
        """The session's tools as the chat template takes them."""
        return self._tools

    def reset(self, seed: int) -> list[dict[str, str]]:
        self.close()
        if self.num_tasks is None:
            self.num_tasks = self.environment.num_tasks(self.split)
        if not self.num_tasks:
            raise ValueError(f"{self.name} has no tasks in split {self.split!r}")
        self.session = self._open(seed % self.num_tasks)
        self._tools = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
                       for t in self.session.list_tools()]
        prompt = "".join(block.text for block in self.session.get_prompt() if block.type == "text")
        self.messages, self.rewards, self.steps = [{"role": "user", "content": prompt}], [], 0
        return [dict(m) for m in self.messages]

    def _open(self, index: int) -> Any:
        wait = self.backoff
        for attempt in range(self.attempts + 1):
            try:
                session = self.environment.session(split=self.split, index=index)
                session.__enter__()
                return session
            except Exception as e:  # noqa: BLE001  (a network or service error: retried, then reported)
                if attempt == self.attempts:
                    raise RuntimeError(f"no session of {self.name} ({self.split} task {index}) after {self.attempts + 1} attempts: {e}") from e
                time.sleep(wait)
                wait *= 2
        raise AssertionError("unreachable")

    def step(self, action_text: str) -> tuple[list[dict[str, str]], float, bool, dict[str, Any]]:
        self.steps += 1
        text = action_text.rstrip()
        self.messages.append({"role": "assistant", "content": text})
        call, finished, valid = parse_tool_call(text), False, True
        if call is None or isinstance(call, str):
            valid = False
            self.messages.append({"role": "user", "content": NO_CALL if call is None else
                                  f"Your tool call does not parse: {call}. Write its arguments as JSON inside <tool_call>...</tool_call>."})
        else:
            answer, finished = self._call(*call)
            self.messages.append({"role": "user", "content": f"<tool_response>\n{answer}\n</tool_response>"})
        done = finished or self.steps >= self.max_steps
        reward = self._final(finished) if done else 0.0
        if done:
            self.close()
        info = {"action_is_valid": valid, "success": any(r > 0 for r in self.rewards)}
        return [dict(m) for m in self.messages], reward, done, info

    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        try:
            out = self.session.call_tool(name, arguments)
        except Exception as e:  # noqa: BLE001  (the tool's own error is its answer, as a shell's would be)
            return f"Error running tool {name!r}: {e}", False
        if out.reward is not None:
            self.rewards.append(float(out.reward))
        return "".join(block.text for block in out.blocks if block.type == "text"), bool(out.finished)

    def _final(self, finished: bool) -> float:
        rewards = list(self.rewards)
        if not finished and self.nonterminal_reward is not None:
            rewards.append(float(self.nonterminal_reward))
        return float(REDUCTIONS[self.reduction](rewards)) if rewards else 0.0

    def close(self) -> None:
        if self.session is not None:
            try:
                self.session.__exit__(None, None, None)
            except Exception:  # noqa: BLE001  (a session the service already dropped)
                pass
            self.session = None
