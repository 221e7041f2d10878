"""posttrain.rollout.external_engine against a scripted HTTP endpoint: what each request carries, the
retries and the timeout (rollout.external.*)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import torch

from posttrain.errors import UserError
from posttrain.records import PromptBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.external_engine import build_external_engine


class _Tokenizer:
    """Characters as token ids; EOS 1, pad 0."""

    eos_token_id, pad_token_id = 1, 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


@pytest.fixture
def endpoint():
    """A server answering with the script's status codes in turn (then 200), recording each request."""
    seen, script = [], {"status": [], "delay": 0.0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers["Authorization"], body))
            time.sleep(script["delay"])
            status = script["status"].pop(0) if script["status"] else 200
            payload = {"choices": [{"index": i, "message": {"role": "assistant", "content": "ab"}, "finish_reason": "stop"}
                                   for i in range(body["n"])]} if status == 200 else {"error": {"message": "busy"}}
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen, script
    server.shutdown()
    server.server_close()


def _engine(monkeypatch, url, **external):
    monkeypatch.setenv("EXT_URL", url)
    monkeypatch.setenv("EXT_API_KEY", "k-123")
    ext = SimpleNamespace(model_name="served-model", base_url_env="EXT_URL", api_key_env="EXT_API_KEY", timeout_s=5.0, max_retries=2)
    vars(ext).update(external)
    engine = build_external_engine(SimpleNamespace(rollout=SimpleNamespace(external=ext)), None, _Tokenizer(), seed=0, owns_weights=False)
    engine.pause_s = 0.01
    return engine


def _prompts():
    return PromptBatch(torch.tensor([[5, 6], [7, 8]]), torch.ones(2, 2), uid=["a", "b"],
                       raw_chat=[[{"role": "user", "content": "x"}], [{"role": "user", "content": "y"}]])


def test_each_row_is_one_request_with_the_model_key_and_n(endpoint, monkeypatch):
    url, seen, _ = endpoint
    out = _engine(monkeypatch, url).generate(_prompts(), SamplingParams(do_sample=False, n=2, max_new_tokens=3), expected_version=0)
    assert [(p, auth, b["model"], b["messages"][0]["content"], b["n"]) for p, auth, b in seen] == [
        ("/v1/chat/completions", "Bearer k-123", "served-model", "x", 2), ("/v1/chat/completions", "Bearer k-123", "served-model", "y", 2)]
    assert out.group_index == ["a", "a", "b", "b"]
    assert out.response_ids.tolist() == [[97, 98, 1]] * 4 and out.response_mask.sum().item() == 12  # "ab" + EOS
    seen.clear()
    _engine(monkeypatch, url, model_name="other").generate(_prompts(), SamplingParams(max_new_tokens=3), expected_version=0)
    assert {b["model"] for _, _, b in seen} == {"other"}


def test_busy_answers_are_retried_max_retries_times(endpoint, monkeypatch):
    url, seen, script = endpoint
    script["status"] = [503, 429]
    _engine(monkeypatch, url, max_retries=2).generate(_prompts(), SamplingParams(max_new_tokens=3), expected_version=0)
    assert len(seen) == 4  # two failures, then the two rows
    seen.clear()
    script["status"] = [503, 503]
    with pytest.raises(UserError, match=r"external model at http://127.0.0.1:\d+/v1/chat/completions: HTTP 503: .*busy.*after 2 tries"):
        _engine(monkeypatch, url, max_retries=1).generate(_prompts(), SamplingParams(max_new_tokens=3), expected_version=0)
    assert len(seen) == 2


def test_a_slow_answer_past_timeout_s_fails(endpoint, monkeypatch):
    url, seen, script = endpoint
    script["delay"] = 0.5
    with pytest.raises(UserError, match=r"external model at .*timed out.*after 1 tries"):
        _engine(monkeypatch, url, timeout_s=0.1, max_retries=0).generate(_prompts(), SamplingParams(max_new_tokens=3), expected_version=0)
    _engine(monkeypatch, url, timeout_s=5.0, max_retries=0).generate(_prompts(), SamplingParams(max_new_tokens=3), expected_version=0)
