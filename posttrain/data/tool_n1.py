"""Prompts of Tool-N1 rows (data.prompt_format: tool_n1): a tool-calling conversation to be answered
with one reply that reasons in ``<think>`` tags and then calls tools in ``<tool_call>`` tags.

Tool-N1 ("Nemotron-Research-Tool-N1", arXiv:2505.00024) trains on rows with
these columns, which Trinity-RFT's ``toolcall_workflow`` reads as well:

- ``raw_system``: the system text of the conversation;
- ``tools``: the tool schemas, a list of objects (or its JSON text);
- ``conversations``: the turns so far, ``[{from, value}]`` with ``from`` one of human/user,
  gpt/assistant, observation/tool and function_call (a call written as JSON, an assistant turn);
- ``answer``: the calls the reply must make (the ground truth: posttrain.rewards.tool_n1).

The prompt is the system message ``raw_system`` + `TOOL_INSTRUCTIONS` (each tool one JSON line
``{"type": "function", "function": schema}`` inside ``<tools>``), then the turns, in order.
"""

from __future__ import annotations

import json
from typing import Any

from posttrain.data.files import RowTable
from posttrain.data.prompts import Message
from posttrain.errors import DataError

# Tool-N1's instructions after the system text; {tools} is the JSON lines of the schemas.
TOOL_INSTRUCTIONS = """# Tool

<tools>
{tools}
</tools>

In each action step, you MUST:
1. Think about the reasoning process in the mind and enclosed your reasoning within <think> </think> XML tags.
2. Then, provide a json object with function names and arguments within <tool_call></tool_call> XML tags. i.e., <tool_call>[{{"name": <function-name>, "arguments": <args-json-object>}}, {{"name": <function-name2>, "arguments": <args-json-object2>}}, ...]</tool_call>
3. Make sure both the reasoning and the tool call steps are included together in one single reply.
A complete reply example is: <think>To address the query, I need to send the email to Bob and then buy the banana through walmart. </think> <tool_call> [{{"name": "email", "arguments": {{"receiver": "Bob", "content": "I will bug banana through walmart"}}}}, {{"name": "walmart", "arguments": {{"input": "banana"}}}}]</tool_call>. Please make sure the type of the arguments is correct.
"""
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "observation": "tool", "tool": "tool"}
COLUMNS = ("raw_system", "tools", "conversations")


def tool_lines(tools: Any) -> str:
    """One JSON line per tool schema (a list, or its JSON text).

    >>> tool_lines('[{"name": "f"}]')
    '{"type": "function", "function": {"name": "f"}}'
    """
    schemas = json.loads(tools) if isinstance(tools, str) else list(tools)
    return "\n".join(json.dumps({"type": "function", "function": schema}) for schema in schemas)


def tool_n1_messages(table: RowTable, i: int) -> list[Message]:
    """The chat messages of Tool-N1 row i (module docstring); a missing column or a bad cell is a
    DataError naming file, row and column."""
    cells = {name: table.get(i, name, setting="data.prompt_format (tool_n1 rows)") for name in COLUMNS}
    try:
        system = str(cells["raw_system"]) + TOOL_INSTRUCTIONS.format(tools=tool_lines(cells["tools"]))
    except (TypeError, ValueError) as err:
        raise DataError(f"{table.locate(i, 'tools')}: expected a list of tool schemas or its JSON text ({err})") from None
    messages = [{"role": "system", "content": system}]
    for turn in cells["conversations"] or []:
        source, value = (turn.get("from"), turn.get("value")) if isinstance(turn, dict) else (None, None)
        if source == "function_call":  # a call made earlier: the assistant's turn, written as JSON
            messages.append({"role": "assistant", "content": json.dumps(value)})
        elif source in ROLES and isinstance(value, str):
            messages.append({"role": ROLES[source], "content": value})
        elif source not in ROLES:  # Tool-N1 skips turns of other sources; so does posttrain
            continue
        else:
            raise DataError(f"{table.locate(i, 'conversations')}: a {source} turn's value must be text, got {type(value).__name__}")
    return messages
