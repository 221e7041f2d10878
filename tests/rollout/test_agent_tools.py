"""OpenAI tool calling and reasoning on the agent function's endpoint (rollout.agent.tool_call_parser,
enable_auto_tool_choice, reasoning_parser): the request's tools reach the chat template, the policy's
text comes back as tool_calls and reasoning_content, and the recorded call stays the sampled tokens."""

from __future__ import annotations

import pytest

from posttrain.config.load import load_config
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.rollout.agent_endpoint import AgentEndpoint, PolicySampling
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.chat_parsing import split_reasoning, tool_calls_of
from posttrain.rollout.server import ChatService
from posttrain.trainer.agent_fn import agent_parsing
from http_helpers import ScriptedEngine, call

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {}, "b": {}}}}}]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
ASK = {"model": "policy", "messages": [{"role": "user", "content": "1+2?"}], "tools": TOOLS}


def endpoint_for(text, *overrides):
    """An agent endpoint whose policy always writes `text`, read as `overrides` of rollout.agent configure."""
    tokenizer = build_tiny_tokenizer()
    engine = ScriptedEngine(tokenizer, text)
    endpoint = AgentEndpoint(tokenizer, "policy", parsing=agent_parsing(load_config(None, list(overrides))))
    endpoint.set_policy(PolicySampling(lambda p, sp: engine.generate(p, sp, expected_version=0), 0, SamplingParams(max_new_tokens=200), 400))
    return endpoint, engine, tokenizer


def ask(endpoint, body, eid="e"):
    record = endpoint.open(eid)
    try:
        return (*call(endpoint.port, f"/agent/{eid}/v1/chat/completions", body), record)
    finally:
        endpoint.close(eid)


def test_tools_reach_the_template_and_hermes_calls_come_back_as_tool_calls_while_the_sampled_ids_are_recorded():
    endpoint, engine, tokenizer = endpoint_for("<think>sum them</think>Let me add." + CALL, "rollout.agent.reasoning_parser=deepseek_r1")
    try:
        status, out, record = ask(endpoint, ASK)
        assert status == 200, out
        choice = out["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        message = choice["message"]
        assert message["content"] == "Let me add." and message["reasoning_content"] == "sum them"
        [tool_call] = message["tool_calls"]
        assert tool_call["id"].startswith("chatcmpl-tool-") and tool_call["type"] == "function"
        assert tool_call["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
        assert "<tools>add(a,b)</tools>" in tokenizer.decode(out["prompt_token_ids"])  # the template rendered the tools
        # parsing changed only the JSON: the recorded call is every sampled token, think and call included
        [recorded] = record.calls
        assert recorded.response_ids == engine.ids and recorded.logprobs == [-0.5] * len(engine.ids)
        # the agent sends the call back with the tool's answer: both rendered by the template, arguments as a mapping
        history = ASK["messages"] + [message, {"role": "tool", "tool_call_id": tool_call["id"], "content": "3"}]
        status, again, _ = ask(endpoint, {**ASK, "messages": history})
        prompt = tokenizer.decode(again["prompt_token_ids"])
        assert status == 200 and CALL in prompt and "<tool_response>\n3\n</tool_response>" in prompt
    finally:
        endpoint.shutdown()


def test_tool_choice_none_and_requests_without_tools_answer_the_text():
    endpoint, _, _ = endpoint_for("Let me add." + CALL)
    try:
        for body in ({**ASK, "tool_choice": "none"}, {"messages": ASK["messages"]}):
            status, out, _ = ask(endpoint, body)
            assert status == 200 and out["choices"][0]["finish_reason"] == "stop"
            assert out["choices"][0]["message"] == {"role": "assistant", "content": "Let me add." + CALL}
    finally:
        endpoint.shutdown()


@pytest.mark.parametrize("override, body, expected", [
    ("rollout.agent.enable_auto_tool_choice=false", ASK, '"auto" tool choice needs rollout.agent.enable_auto_tool_choice true'),
    ("rollout.agent.tool_call_parser=null", {**ASK, "tool_choice": "auto"}, "tool-call parser none"),
    ("rollout.agent.max_concurrency=1", {**ASK, "tool_choice": "required"}, "forcing a tool call needs constrained decoding"),
    ("rollout.agent.max_concurrency=1", {**ASK, "tool_choice": {"type": "function", "function": {"name": "add"}}}, "constrained decoding"),
    ("rollout.agent.max_concurrency=1", {"messages": ASK["messages"], "tool_choice": "auto"}, "needs tools: the request has none"),
])
def test_a_tool_choice_the_endpoint_cannot_honour_is_a_400_that_says_why(override, body, expected):
    endpoint, _, _ = endpoint_for("Let me add." + CALL, override)
    try:
        status, out, record = ask(endpoint, body)
        assert status == 400 and expected in out["error"]["message"], out
        assert record.calls == [] and expected in record.refused[0]  # nothing sampled, the refusal kept for the failure message
    finally:
        endpoint.shutdown()


def test_a_malformed_call_is_left_in_the_content():
    text = 'Let me add.<tool_call>{"name": "add", </tool_call>'
    assert tool_calls_of("hermes", text) == (text, [])
    assert tool_calls_of("hermes", "no call") == ("no call", [])
    content, calls = tool_calls_of("hermes", CALL + "\n" + CALL.replace('"a": 1', '"a": 5'))
    assert content is None and [c["function"]["arguments"] for c in calls] == ['{"a": 1, "b": 2}', '{"a": 5, "b": 2}']
    assert calls[0]["id"] != calls[1]["id"]


@pytest.mark.parametrize("parser, text, expected", [
    (None, "<think>a</think>b", (None, "<think>a</think>b")),
    ("deepseek_r1", "<think>a</think>b", ("a", "b")),
    ("deepseek_r1", "a</think>b", ("a", "b")),  # the template opened the block in the prompt
    ("deepseek_r1", "<think>cut off", ("cut off", None)),  # no end: all reasoning
    ("deepseek_r1", "a</think>", ("a", None)),
    ("qwen3", "<think>a</think>b", ("a", "b")),
    ("qwen3", "a</think>b", (None, "a</think>b")),  # qwen3 needs both tags
    ("qwen3", "b", (None, "b")),
])
def test_reasoning_parsers_split_the_think_block(parser, text, expected):
    assert split_reasoning(parser, text) == expected


def test_the_reasoning_parser_key_changes_the_answer_and_calls_after_the_reasoning_are_read():
    text = "<think>maybe " + CALL + "</think>ok"
    for override, content, reasoning, calls in (("rollout.agent.reasoning_parser=null", None, None, 1),
                                                ("rollout.agent.reasoning_parser=qwen3", "ok", "maybe " + CALL, 0)):
        endpoint, _, _ = endpoint_for(text, override)
        try:
            status, out, _ = ask(endpoint, ASK)
            message = out["choices"][0]["message"]
            assert status == 200 and message.get("reasoning_content") == reasoning and len(message.get("tool_calls", [])) == calls
            if content is not None:
                assert message["content"] == content
        finally:
            endpoint.shutdown()


class PromptKeeper(ScriptedEngine):
    """A scripted engine that keeps the prompts it was given."""

    def generate(self, prompts, params, **kwargs):
        self.prompts = getattr(self, "prompts", []) + [prompts.input_ids[0].tolist()]
        return super().generate(prompts, params, **kwargs)


def test_chat_template_variables_come_from_the_service_and_the_request():
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = "{{ 'T' if enable_thinking else 'F' }}{{ messages[0]['content'] }}"
    engine = PromptKeeper(tokenizer, "x")
    service = ChatService(engine, tokenizer, "m", template_kwargs={"enable_thinking": True})  # data.enable_thinking's
    messages = [{"role": "user", "content": "hi"}]
    service.complete({"messages": messages})
    service.complete({"messages": messages, "chat_template_kwargs": {"enable_thinking": False}})  # the request's own wins
    assert [tokenizer.decode(p) for p in engine.prompts] == ["Thi", "Fhi"]


def test_the_docstring_examples_of_the_parsers_and_of_the_serve_flags_hold():
    import doctest

    import posttrain.cli.serve as serve
    import posttrain.rollout.chat_parsing as chat_parsing

    for module in (chat_parsing, serve):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
