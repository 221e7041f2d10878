"""What an OpenAI-compatible chat endpoint makes of a completion's text: reasoning and tool calls.

posttrain's chat endpoints (`posttrain serve`, the agent function's loopback endpoint) answer as
vLLM's OpenAI server does when it is started with a tool-call parser, auto tool choice and a
reasoning parser (`ChatParsing`; for an agent function `rollout.agent.*`):

- Reasoning (`reasoning_parser`): the text inside ``<think>...</think>`` becomes the message's
  ``reasoning_content``, the rest its ``content``. ``deepseek_r1``: an opening ``<think>`` is
  optional (the chat template may have written it into the prompt); the text up to ``</think>`` is
  reasoning, and without ``</think>`` all of it is (the model was cut off while thinking).
  ``qwen3`` (Qwen3's templates let the model write both tags): only a completion holding both tags
  has reasoning; otherwise all of it is content (a template with thinking off writes the empty
  block into the prompt).
- Tool calls (`tool_call_parser`, used when the request has ``tools`` and its ``tool_choice`` is
  ``auto``): ``hermes`` reads ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks
  with posttrain.tools.hermes (the multi-turn tool loop's parser). Each becomes an OpenAI tool call
  (a fresh id, type function, arguments as a JSON string); the text outside the blocks is the
  content (null when only whitespace is left). When any block cannot be read, or none is there, the
  whole text is the content and there are no tool calls, as vLLM's hermes parser answers.

Only the JSON the client reads changes: the recorded token ids and log-probs are the sampled ones.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from posttrain.tools.base import ToolCall
from posttrain.tools.hermes import PARSERS as TOOL_CALL_PARSERS
from posttrain.tools.hermes import START as TOOL_START

THINK_START, THINK_END = "<think>", "</think>"


@dataclass(frozen=True)
class ChatParsing:
    """How completions are read (module docstring); `setting` names, for messages, where a user
    turns auto tool choice on (a config key, a command-line flag)."""

    tool_call_parser: str | None = "hermes"  # None: tool calls stay in the text
    enable_auto_tool_choice: bool = True  # False: a request with tools and tool_choice auto is refused
    reasoning_parser: str | None = None  # None: <think> blocks stay in the text
    setting: str = "enable_auto_tool_choice and tool_call_parser"


def _deepseek_r1(text: str) -> tuple[str | None, str | None]:
    """(reasoning, content), as vLLM's deepseek_r1 parser splits a finished completion.

    >>> _deepseek_r1("<think>add them</think>3"), _deepseek_r1("still thinking"), _deepseek_r1("add</think>")
    (('add them', '3'), ('still thinking', None), ('add', None))
    """
    before, tag, after = text.partition(THINK_START)
    text = after if tag else before  # the opening tag is optional: the template may have written it
    if THINK_END not in text:
        return text, None  # cut off while thinking: all of it is reasoning
    reasoning, _, content = text.partition(THINK_END)
    return reasoning, content or None


def _qwen3(text: str) -> tuple[str | None, str | None]:
    """(reasoning, content), reasoning only when the completion holds both tags.

    >>> _qwen3("<think>add</think>3"), _qwen3("3"), _qwen3("add</think>3")
    (('add', '3'), (None, '3'), (None, 'add</think>3'))
    """
    if THINK_START not in text or THINK_END not in text:
        return None, text
    reasoning, _, content = text.partition(THINK_START)[2].partition(THINK_END)
    return reasoning, content or None


REASONING_PARSERS: dict[str, Callable[[str], tuple[str | None, str | None]]] = {"deepseek_r1": _deepseek_r1, "qwen3": _qwen3}


def split_reasoning(parser: str | None, text: str) -> tuple[str | None, str | None]:
    """(reasoning_content, content) of `text` under the named reasoning parser (None: no reasoning)."""
    if parser is None:
        return None, text
    return REASONING_PARSERS[parser](text)


def tool_calls_of(parser: str, text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, OpenAI tool calls) of `text` (module docstring).

    >>> content, calls = tool_calls_of("hermes", 'Sure.<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
    >>> content, [(c["type"], c["function"]) for c in calls]
    ('Sure.', [('function', {'name': 'add', 'arguments': '{"a": 1}'})])
    >>> tool_calls_of("hermes", '<tool_call>{"name": </tool_call>')
    ('<tool_call>{"name": </tool_call>', [])
    """
    parsed: list[ToolCall] = TOOL_CALL_PARSERS[parser](text)
    if not parsed or any(c.error is not None for c in parsed):
        return text, []
    outside = re.sub(re.escape(TOOL_START) + r".*?</tool_call>", "", text, flags=re.DOTALL).strip()
    calls = [{"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function",
              "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}} for c in parsed]
    return outside or None, calls


def template_messages(messages: list[Any]) -> list[Any]:
    """The request's messages as chat templates read them: an assistant turn's tool calls carry
    their arguments as a mapping (OpenAI clients send a JSON string; templates write the mapping
    with ``tojson``, and would write a string twice quoted), as vLLM hands them to the template.
    A content given as a list of text parts (``[{"type": "text", "text": ...}, ...]``, as OpenAI
    clients and agent frameworks such as AgentScope send it) becomes their texts joined by newlines,
    as vLLM flattens it for a template that writes the content as a string; a list holding any other
    part stays a list. Messages are copied, never changed in place; arguments that are not JSON stay
    as they are.

    >>> template_messages([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    [{'role': 'user', 'content': 'a\\nb'}]
    """
    out = []
    for m in messages:
        calls = m.get("tool_calls") if isinstance(m, dict) and m.get("role") == "assistant" else None
        if isinstance(calls, list):
            m = {**m, "tool_calls": [_with_mapping(c) for c in calls]}
        parts = m.get("content") if isinstance(m, dict) else None
        if isinstance(parts, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in parts):
            m = {**m, "content": "\n".join(p["text"] for p in parts)}
        out.append(m)
    return out


def _with_mapping(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        arguments = json.loads(fn["arguments"])
    except json.JSONDecodeError:
        return call
    return {**call, "function": {**fn, "arguments": arguments}}
