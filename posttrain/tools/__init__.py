"""Tool calling (verl's multi-turn rollout): tools, the tool config, the Hermes parser, the tool env.

The agent loop (`posttrain.rollout.agent_loop`) plays a `ToolEnv` like any environment; the tool
rollout (`posttrain.rollout.tool_loop`) makes one per response from a batch of prompts.
"""

from posttrain.tools.base import TOOLS, Tool, ToolCall, ToolResult, register_tool
from posttrain.tools.config import ToolSpec, build_tools, load_tool_config
from posttrain.tools.hermes import PARSERS, parse_hermes
from posttrain.tools.session import ToolEnv, ToolLimits, ToolStats, truncate

__all__ = ["PARSERS", "TOOLS", "Tool", "ToolCall", "ToolEnv", "ToolLimits", "ToolResult", "ToolSpec", "ToolStats",
           "build_tools", "load_tool_config", "parse_hermes", "register_tool", "truncate"]
