"""An OpenAI-compatible HTTP endpoint over any rollout engine (`posttrain serve`, docs/engines.md).

Two routes, the subset agents and evaluation harnesses call:

- ``GET /v1/models``: the one served model.
- ``POST /v1/chat/completions``: ``messages`` (and ``tools``) go through the tokenizer's chat
  template; ``n``, ``temperature`` (0: greedy), ``top_p``, ``max_tokens`` (or
  ``max_completion_tokens``), ``stop`` (a string or a list), ``seed`` and ``logprobs`` are honoured;
  any other field is refused with a 400 naming it, rather than ignored. The model's Hermes-style
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks become ``tool_calls`` (and
  ``finish_reason: tool_calls``); the text around them is the message ``content``.

Standard library only (`http.server`, one thread per connection); requests are served one at a
time by the engine (a lock), each as one `generate` call with its n responses. Bound to 127.0.0.1
unless told otherwise: it has no authentication.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from posttrain.records import PromptBatch
from posttrain.rollout.base import RolloutEngine, SamplingParams

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_KNOWN = {"model", "messages", "tools", "tool_choice", "n", "temperature", "top_p", "max_tokens",
          "max_completion_tokens", "stop", "seed", "logprobs", "stream", "user"}


class RequestError(ValueError):
    """A request the server answers with 400 and this message."""


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) of a Hermes-style reply: each ``<tool_call>`` block holding JSON with a
    name and arguments becomes an OpenAI tool call; a block that is not such JSON stays in the text.

    >>> parse_tool_calls('Sure.<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
    ('Sure.', [{'id': 'call_0', 'type': 'function', 'function': {'name': 'add', 'arguments': '{"a": 1}'}}])
    """
    calls, kept = [], []
    last = 0
    for match in _TOOL_CALL.finditer(text):
        try:
            body = json.loads(match.group(1))
            name, arguments = body["name"], body.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        kept.append(text[last:match.start()])
        last = match.end()
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append({"id": f"call_{len(calls)}", "type": "function", "function": {"name": name, "arguments": arguments}})
    kept.append(text[last:])
    content = "".join(kept).strip()
    return (content or None) if calls else text, calls


def sampling_from(body: dict[str, Any]) -> SamplingParams:
    """SamplingParams of a chat-completions request (OpenAI's defaults: temperature 1, n 1)."""
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise RequestError(f"unsupported field(s): {', '.join(unknown)}")
    if body.get("stream"):
        raise RequestError("stream: true is not supported; ask for the whole completion")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    temperature = float(body.get("temperature", 1.0))
    try:
        return SamplingParams(
            temperature=temperature if temperature > 0 else 1.0, do_sample=temperature > 0,
            top_p=float(body.get("top_p", 1.0)), n=int(body.get("n", 1)),
            max_new_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 256),
            stop=stop, seed=body.get("seed"),
        )
    except (TypeError, ValueError) as err:
        raise RequestError(str(err)) from None


class ChatService:
    """Chat completions from an engine and its tokenizer (the HTTP layer is `serve`)."""

    def __init__(self, engine: RolloutEngine, tokenizer: Any, model_name: str):
        self.engine, self.tokenizer, self.model_name = engine, tokenizer, model_name
        self.lock = threading.Lock()  # engines decode one batch at a time

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "posttrain"}]}

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        params = sampling_from(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages: a non-empty list of {role, content} is required")
        try:
            text = self.tokenizer.apply_chat_template(messages, tools=body.get("tools"), add_generation_prompt=True, tokenize=False)
        except Exception as err:  # the template's own message (unknown role, ...)
            raise RequestError(f"messages: the chat template refused them: {err}") from None
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        # engines key sampling by (seed, prompt uid, sample): a seeded request repeats with a fixed
        # uid, an unseeded one draws anew with a fresh uid
        uid = "seeded" if params.seed is not None else uuid.uuid4().hex
        prompt = PromptBatch(torch.tensor([ids]), torch.ones(1, len(ids)), uid=[uid])
        with self.lock:
            out = self.engine.generate(prompt, params, expected_version=self.engine.weights_version)
        choices, completion_tokens = [], 0
        for i in range(len(out)):
            n = int(out.response_mask[i].sum())
            tokens = out.response_ids[i, :n].tolist()
            completion_tokens += n
            choices.append(self._choice(i, tokens, out.rollout_logprobs[i, :n].tolist(), params, bool(body.get("logprobs"))))
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model_name, "choices": choices,
            "usage": {"prompt_tokens": len(ids), "completion_tokens": completion_tokens, "total_tokens": len(ids) + completion_tokens},
        }

    def _choice(self, index: int, tokens: list[int], logprobs: list[float], params: SamplingParams, with_logprobs: bool) -> dict[str, Any]:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        hit = next((s for s in params.stop if text.endswith(s)), None)
        if hit is not None:  # OpenAI leaves the stop sequence out of the content
            text = text[: len(text) - len(hit)]
        ended = hit is not None or len(tokens) < params.max_new_tokens or (tokens and tokens[-1] in _eos_ids(self.tokenizer, self.engine))
        content, calls = parse_tool_calls(text)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        choice: dict[str, Any] = {"index": index, "message": message,
                                  "finish_reason": "tool_calls" if calls else "stop" if ended else "length"}
        if with_logprobs:
            choice["logprobs"] = {"content": [
                {"token": self.tokenizer.decode([t]), "logprob": lp, "bytes": list(self.tokenizer.decode([t]).encode()), "top_logprobs": []}
                for t, lp in zip(tokens, logprobs)
            ]}
        return choice


def _eos_ids(tokenizer: Any, engine: Any) -> set[int]:
    return set(getattr(engine, "eos_token_ids", None) or ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []))


def make_server(service: ChatService, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """An HTTP server answering the two routes with `service` (call `serve_forever()`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, service.models())
            else:
                self._send(404, _error(f"no route {self.path}; this server has GET /v1/models and POST /v1/chat/completions", "not_found"))

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, _error(f"no route {self.path}", "not_found"))
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not isinstance(body, dict):
                    raise RequestError("the body must be a JSON object")
                self._send(200, service.complete(body))
            except json.JSONDecodeError as err:
                self._send(400, _error(f"the body is not JSON: {err}"))
            except RequestError as err:
                self._send(400, _error(str(err)))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # one line per request is noise for agents' many calls
            pass

    return ThreadingHTTPServer((host, port), Handler)


def _error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}
