"""Hermes-style tool calls (Qwen2.5, Hermes 2 Pro; verl's ``format: hermes``) read from the model's text.

A call is a JSON object ``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` and
``</tool_call>``. Every block becomes a `ToolCall`; one that is not such an object becomes a call
with an ``error`` (verl logs and drops it; here the model is told, in the tool message, what was
wrong, so a malformed call is visible to training as a failed call rather than as silence). An
opening tag without its closing tag is a parse failure too. Text outside the blocks is ignored.

>>> [c.name for c in parse_hermes('ok <tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>')]
['calculator']
>>> parse_hermes('<tool_call>{"name": "calculator"</tool_call>')[0].error
"not valid JSON: Expecting ',' delimiter at position 21"
>>> parse_hermes("no call")
[]
"""

from __future__ import annotations

import json
import re

from posttrain.tools.base import ToolCall

START, END = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(START) + r"(.*?)" + re.escape(END), re.DOTALL)


def parse_hermes(text: str) -> list[ToolCall]:
    """The calls in `text`, in order (module docstring)."""
    calls = [_call(body) for body in _BLOCK.findall(text)]
    if text.count(START) > len(calls):  # a block the model opened and never closed
        calls.append(ToolCall(None, None, f"{START} without {END}"))
    return calls


def _call(body: str) -> ToolCall:
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall(None, None, f"not valid JSON: {e.msg} at position {e.pos}")
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return ToolCall(None, None, 'expected {"name": ..., "arguments": {...}}')
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        return ToolCall(value["name"], None, "arguments must be a JSON object")
    return ToolCall(value["name"], arguments)


PARSERS = {"hermes": parse_hermes}
