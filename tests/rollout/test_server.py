"""`posttrain serve`: the OpenAI-compatible endpoint, over HTTP on a free port."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.error

import pytest

from posttrain.cluster.launch import free_port
from posttrain.models.tiny import make_tiny_model
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.rollout import HFEngine
from posttrain.rollout.server import ChatService, make_server
from http_helpers import ScriptedEngine, call


@pytest.fixture
def serving():
    servers = []

    def start(engine, tokenizer):
        port = free_port()
        server = make_server(ChatService(engine, tokenizer, "tiny"), "127.0.0.1", port)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return port

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_chat_completions_sample_n_with_logprobs_and_stop(serving, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=4)).eval()
    tokenizer = build_tiny_tokenizer()
    engine = HFEngine(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[], tokenizer=tokenizer)
    port = serving(engine, tokenizer)
    assert call(port, "/v1/models") == (200, {"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "posttrain"}]})
    messages = [{"role": "user", "content": "hi"}]
    status, out = call(port, "/v1/chat/completions", {"model": "tiny", "messages": messages, "n": 3, "temperature": 0.8,
                                                       "top_p": 0.9, "max_tokens": 6, "logprobs": True, "seed": 1})
    assert status == 200 and len(out["choices"]) == 3 and out["usage"]["completion_tokens"] == 18
    first = out["choices"][0]
    assert first["finish_reason"] == "length" and len(first["logprobs"]["content"]) == 6
    assert all(entry["logprob"] <= 0 for entry in first["logprobs"]["content"])
    again = call(port, "/v1/chat/completions", {"messages": messages, "n": 3, "temperature": 0.8, "top_p": 0.9, "max_tokens": 6, "seed": 1})[1]
    assert [c["message"]["content"] for c in again["choices"]] == [c["message"]["content"] for c in out["choices"]]  # seeded
    greedy = call(port, "/v1/chat/completions", {"messages": messages, "temperature": 0, "max_tokens": 8})[1]["choices"][0]
    text = greedy["message"]["content"]
    stop = text[2:4]
    stopped = call(port, "/v1/chat/completions", {"messages": messages, "temperature": 0, "max_tokens": 8, "stop": stop})[1]
    assert stopped["choices"][0]["message"]["content"] == text[: text.index(stop)]  # the stop string is left out
    assert stopped["choices"][0]["finish_reason"] == "stop"
    bad = call(port, "/v1/chat/completions", {"messages": messages, "frequency_penalty": 1.0})
    assert bad == (400, {"error": {"message": "unsupported field(s): frequency_penalty", "type": "invalid_request_error"}})
    assert call(port, "/v1/chat/completions", {"messages": []})[0] == 400
    assert call(port, "/v1/completions", {})[0] == 404


def test_hermes_tool_calls_become_tool_calls(serving):
    tokenizer = build_tiny_tokenizer()
    text = 'Let me add.<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    port = serving(ScriptedEngine(tokenizer, text), tokenizer)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    status, out = call(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "1+2"}], "tools": tools})
    message = out["choices"][0]["message"]
    assert status == 200 and out["choices"][0]["finish_reason"] == "tool_calls"
    assert message["tool_calls"][0]["id"].startswith("chatcmpl-tool-")  # a fresh id per call, as vLLM's
    assert message == {"role": "assistant", "content": "Let me add.", "tool_calls": [
        {"id": message["tool_calls"][0]["id"], "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]}


def test_posttrain_serve_answers_over_http(tmp_path):
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "posttrain", "serve", str(model), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {model} as model on http://127.0.0.1:{port}/v1"), line
        deadline = time.monotonic() + 30
        while True:
            try:
                status, out = call(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "2+2"}], "max_tokens": 4})
                break
            except urllib.error.URLError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert status == 200 and out["model"] == "model" and out["usage"]["completion_tokens"] >= 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
