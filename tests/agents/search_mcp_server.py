"""A stand-in web-search MCP server for the search agent's tests: one tool over stdio, answering from a
fixed page (no network). Run as a child process by tests/agents/test_agentscope_search.py."""

from mcp.server.fastmcp import FastMCP

server = FastMCP("fake-search")


@server.tool()
def web_search(query: str) -> str:
    """Search the web and return the best page's text."""
    return f"Top result for '{query}': Paris has been the capital of France since 987."


if __name__ == "__main__":
    server.run()
