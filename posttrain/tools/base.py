"""What a tool is, what a call and its result are, and the registry of built-in tools.

A tool is any class whose instances have ``execute(arguments: dict) -> str | ToolResult``; the tool
config (`posttrain.tools.config`) builds it with its ``config`` mapping as keyword arguments
and gives it an OpenAI function schema (the config's ``tool_schema``, else the class's ``schema``
attribute). The schema's ``function.name`` is the name the model calls it by. verl's tools take
``(config, tool_schema)`` and are asynchronous with per-trajectory instances; posttrain's are plain
synchronous callables, one instance per run (the loop calls them from one thread).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable


@dataclass(frozen=True)
class ToolResult:
    """What a tool answers: the text the model reads and an optional reward (verl's tool reward,
    passed to the reward function in ``extra_info["tool_rewards"]``)."""

    text: str
    reward: float = 0.0


@dataclass(frozen=True)
class ToolCall:
    """One call parsed from the model's text: a name and arguments, or why it could not be read."""

    name: str | None
    arguments: dict[str, Any] | None
    error: str | None = None  # the parse failure: the call becomes an error message, never runs


@runtime_checkable
class Tool(Protocol):
    def execute(self, arguments: dict[str, Any]) -> str | ToolResult:
        """Run the tool on the model's arguments; raise on a bad argument (the loop turns any
        exception into an error message for the model)."""
        ...


TOOLS: dict[str, type] = {}


def register_tool(name: str) -> Callable[[type], type]:
    """Class decorator: make `name` a built-in ``class_name`` of tool configs."""

    def add(cls: type) -> type:
        if name in TOOLS:
            raise ValueError(f"tool {name!r} is registered twice")
        TOOLS[name] = cls
        return cls

    return add


def function_schema(name: str, description: str, parameters: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An OpenAI function-tool schema.

    >>> function_schema("f", "d", {"x": {"type": "string"}}, ["x"])["function"]["parameters"]["required"]
    ['x']
    """
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": parameters, "required": required}}}
