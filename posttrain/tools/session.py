"""`ToolEnv`: one conversation in which the model may call tools, as an environment of the agent loop.

Each model turn is parsed for tool calls (`posttrain.tools.hermes`). With calls, the first
`max_parallel_calls` run and their answers come back as ``tool`` messages (the observation is that
list of messages, rendered by the chat template as the tool turn); without, the conversation ends,
unless an interaction (a simulated user, verl's ``interaction_config_path``) answers with a user
message. The limits mirror verl's tool agent loop: after `max_assistant_turns` model turns, or once
`max_user_turns` tool/user turns were added, the next model turn is the last.

A tool never ends the run: a call that is not valid JSON, names an unknown tool, has bad arguments
or raises becomes an error message the model reads (and a failed call in the statistics). A tool
answer longer than `max_tool_response_length` characters is cut on `truncate_side`, as verl:
``left`` keeps its first characters, ``right`` its last ones, ``middle`` both ends, half each.

The env scores nothing (reward 0.0 on every turn): the conversation is scored once by the stage's
reward function, which finds the tool rewards and the interaction's turn scores in
``extra_info["tool_rewards"]`` and ``extra_info["turn_scores"]``.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.tools.base import ToolCall, ToolResult

Message = dict[str, Any]
TRUNCATED = "...(truncated)..."


@dataclass(frozen=True)
class ToolLimits:
    """rollout.multi_turn's limits on one conversation (see the module docstring)."""

    max_assistant_turns: int | None = None  # None: until the token budget ends it
    max_user_turns: int | None = None
    max_parallel_calls: int = 1
    max_tool_response_length: int = 256  # characters
    truncate_side: str = "middle"  # left, right or middle


@dataclass
class ToolStats:
    """What the tools did in one conversation (summed into the tool/* metrics)."""

    calls: int = 0  # calls the model wrote, parsed or not, up to max_parallel_calls per turn
    succeeded: int = 0  # ran and returned
    parse_failures: int = 0  # not valid JSON / not a {"name", "arguments"} object
    unknown_tool: int = 0
    failed: int = 0  # the tool raised (bad arguments included)
    truncated: int = 0  # answers cut to max_tool_response_length
    dropped: int = 0  # calls beyond max_parallel_calls in a turn
    tool_rewards: list[float] = field(default_factory=list)
    turn_scores: list[float] = field(default_factory=list)  # the interaction's per-turn scores


def truncate(text: str, limit: int, side: str) -> str:
    """`text` cut to `limit` characters as verl cuts a tool answer (module docstring).

    >>> truncate("abcdefgh", 4, "left"), truncate("abcdefgh", 4, "right"), truncate("abcdefgh", 4, "middle")
    ('abcd...(truncated)', '(truncated)...efgh', 'ab...(truncated)...gh')
    """
    if len(text) <= limit:
        return text
    if side == "left":
        return text[:limit] + "...(truncated)"
    if side == "right":
        return "(truncated)..." + text[-limit:]
    half = limit // 2
    return text[:half] + TRUNCATED + text[len(text) - half:]


def settle(value: Any) -> Any:
    """A coroutine's result (verl's tools and interactions are async), or `value` itself."""
    return asyncio.run(value) if inspect.isawaitable(value) else value


class ToolEnv:
    """One conversation with tools (and optionally an interaction); see the module docstring."""

    def __init__(self, tools: dict[str, Any], parser: Callable[[str], list[ToolCall]], limits: ToolLimits,
                 interaction: Any = None, interaction_kwargs: dict[str, Any] | None = None, instance_id: str = ""):
        self.tools, self.parser, self.limits = tools, parser, limits
        self.interaction, self.interaction_kwargs, self.instance_id = interaction, dict(interaction_kwargs or {}), instance_id
        self.messages: list[Message] = []  # the turns after the prompt, as chat messages
        self.stats = ToolStats()
        self.assistant_turns = self.user_turns = 0

    def reset(self, seed: int) -> str:
        self.messages, self.stats = [], ToolStats()
        self.assistant_turns = self.user_turns = 0
        if self.interaction is not None:
            settle(self.interaction.start_interaction(self.instance_id, **self.interaction_kwargs))
        return ""  # the prompt comes from the data, already templated with the tools

    def step(self, action_text: str) -> tuple[str | list[Message], float, bool, dict[str, Any]]:
        self.assistant_turns += 1
        self.messages.append({"role": "assistant", "content": action_text})
        lim = self.limits
        if (lim.max_assistant_turns and self.assistant_turns >= lim.max_assistant_turns) or (
                lim.max_user_turns and self.user_turns >= lim.max_user_turns):
            return self._end()
        calls = self.parser(action_text)
        if calls:
            self.stats.dropped += max(0, len(calls) - lim.max_parallel_calls)
            answers = [{"role": "tool", "content": self._run(call)} for call in calls[: lim.max_parallel_calls]]
            return self._add(answers, done=False)
        if self.interaction is None:
            return self._end()
        done, text, score, _ = settle(self.interaction.generate_response(self.instance_id, list(self.messages), **self.interaction_kwargs))
        if score is not None:
            self.stats.turn_scores.append(float(score))
        if done:
            return self._end()
        return self._add([{"role": "user", "content": str(text)}], done=False)

    def _add(self, messages: list[Message], done: bool) -> tuple[list[Message], float, bool, dict[str, Any]]:
        self.user_turns += 1
        self.messages.extend(messages)
        return messages, 0.0, done, {"action_is_valid": True}

    def _end(self) -> tuple[str, float, bool, dict[str, Any]]:
        if self.interaction is not None:
            settle(self.interaction.finalize_interaction(self.instance_id))
        return "", 0.0, True, {"action_is_valid": True}

    def _run(self, call: ToolCall) -> str:
        """The tool message for one call: the tool's answer, or what went wrong."""
        s = self.stats
        s.calls += 1
        if call.error is not None or call.arguments is None:
            s.parse_failures += 1
            return f"Error: could not read the tool call: {call.error}"
        tool = self.tools.get(call.name)
        if tool is None:
            s.unknown_tool += 1
            return f"Error: unknown tool {call.name!r}; available: {', '.join(sorted(self.tools)) or 'none'}"
        try:
            out = settle(tool.execute(call.arguments))
        except Exception as e:  # any failure of a tool is the model's information, never the run's end
            s.failed += 1
            return f"Error when executing tool: {type(e).__name__}: {e}"
        if isinstance(out, ToolResult):
            s.tool_rewards.append(float(out.reward))
            out = out.text
        s.succeeded += 1
        text = str(out)
        if len(text) > self.limits.max_tool_response_length:
            s.truncated += 1
            text = truncate(text, self.limits.max_tool_response_length, self.limits.truncate_side)
        return text
