"""posttrain's web-search agent (posttrain.agents.agentscope_search), Trinity-RFT's
agentscope_v1_react_search_workflow: the real AgentScope ReActAgent calls a search tool of an MCP
server it starts over stdio (a local stand-in here), answers through generate_response, and a judge
model's YES/NO gives the reward; the settings are checked before a run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agentscope", reason="the agentscope extra (pip install 'posttrain[agentscope]')")
pytest.importorskip("mcp", reason="the agentscope extra (pip install 'posttrain[agentscope]')")

from agent_helpers import call, scripted_episode  # noqa: E402
from posttrain.agents import agentscope_search  # noqa: E402
from posttrain.agents.agentscope_search import check_kwargs, judged_correct, search_agent  # noqa: E402

SERVER = [sys.executable, str(Path(__file__).with_name("search_mcp_server.py"))]
ROW = {"problem": "What is the capital of France?", "answer": "Paris"}


def judge_says(verdicts, seen):
    def fake_chat(model, messages, max_tokens):
        seen.append((model, messages, max_tokens))
        return verdicts[len(seen) - 1]
    return fake_chat


def test_the_agent_searches_answers_and_the_judge_decides_the_reward(monkeypatch):
    seen = []
    monkeypatch.setattr(agentscope_search, "chat", judge_says(["1. Reasoning: the same city.\n2. Correctness: YES"], seen))
    texts = [call("web_search", {"query": "capital of France"}), call("generate_response", {"result": "Paris"}), "Paris."]
    result, calls, policy = scripted_episode(search_agent, texts, ROW, search_command=SERVER, max_tokens=200)
    assert result["reward"] == 1.0 and result["agent_error"] == 0.0 and result["judge_error"] == 0.0
    assert len(calls) == 3 and result["react_turns"] >= 1
    assert "web_search" in policy.prompts[0] and "What is the capital of France?" in policy.prompts[0]  # the MCP server's tool
    assert "Paris has been the capital of France since 987" in policy.prompts[1]  # the tool answered through MCP
    [(model, messages, max_tokens)] = seen
    prompt = messages[-1]["content"]
    assert model == "judge" and max_tokens == 1024
    assert "[question]: What is the capital of France?" in prompt and "[response]: Paris" in prompt and "[correct_answer]: Paris" in prompt


def test_a_no_or_a_failed_judge_scores_zero_and_a_dead_server_is_an_agent_error(monkeypatch):
    seen = []
    monkeypatch.setattr(agentscope_search, "chat", judge_says(["Correctness: NO"], seen))
    texts = [call("generate_response", {"result": "Lyon"}), "Lyon."]
    result, _, _ = scripted_episode(search_agent, texts, ROW, search_command=SERVER)
    assert result["reward"] == 0.0 and len(seen) == 1

    def broken(*args, **kwargs):
        raise ConnectionError("judge down")
    monkeypatch.setattr(agentscope_search, "chat", broken)
    result, _, _ = scripted_episode(search_agent, texts, ROW, search_command=SERVER)
    assert result["reward"] == 0.0 and result["judge_error"] == 1.0
    seen.clear()
    monkeypatch.setattr(agentscope_search, "chat", judge_says(["Correctness: YES"], seen))
    dead = [sys.executable, "-c", "import sys; sys.exit(3)"]  # the MCP server dies at start: no reply, nothing judged
    result, calls, _ = scripted_episode(search_agent, texts, ROW, search_command=dead)
    assert result["agent_error"] == 1.0 and result["reward"] == 0.0 and seen == [] and calls == []


def test_the_settings_are_checked_before_a_run(monkeypatch):
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    [problem] = check_kwargs({"search_client_type": "tavily"})
    assert "the environment variable TAVILY_API_KEY is not set" in problem
    monkeypatch.setenv("TAVILY_API_KEY", "k")
    assert check_kwargs({"search_client_type": "tavily"}) == []
    assert "'bing'" in check_kwargs({"search_client_type": "bing"})[0]
    monkeypatch.delenv("SEARXNG_URL", raising=False)
    assert "SEARXNG_URL" in check_kwargs({})[0] and check_kwargs({"search_command": SERVER}) == []
    assert judged_correct("**Correctness**: yes") and not judged_correct("YES\nCorrectness: NO")
