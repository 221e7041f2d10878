"""An OpenAI-compatible HTTP endpoint over any rollout engine (`posttrain serve`, docs/engines.md).

Two routes, the subset agents and evaluation harnesses call:

- ``GET /v1/models``: the one served model.
- ``POST /v1/chat/completions``: ``messages`` (and ``tools``) go through the tokenizer's chat
  template; ``n``, ``temperature`` (0: greedy), ``top_p``, ``max_tokens`` (or
  ``max_completion_tokens``), ``stop`` (a string or a list), ``seed``, ``logprobs``, ``tool_choice``
  and ``chat_template_kwargs`` (variables of the chat template, e.g. enable_thinking) are honoured;
  any other field is refused with a 400 naming it, rather than ignored. ``stream: true`` answers
  with server-sent events as OpenAI's clients read them, but not token by token: the whole
  completion is generated first and sent as one chunk per choice, then ``[DONE]`` (with
  ``stream_options.include_usage`` a usage chunk before it). With ``tools`` and ``tool_choice``
  auto, the model's tool calls (the `ChatParsing`'s parser, Hermes-style ``<tool_call>`` blocks by
  default) become ``tool_calls`` (and ``finish_reason: tool_calls``); the text around them is the
  message ``content``; a reasoning parser puts ``<think>`` blocks in ``reasoning_content``
  (posttrain.rollout.chat_parsing). ``tool_choice`` required or a named function is refused.

Standard library only (`http.server`, one thread per connection). Bound to 127.0.0.1 unless told
otherwise: it has no authentication. Requests arriving together are answered by one engine
`generate` call (`batch_window`; posttrain.rollout.batching's `CallBatcher`): those that arrive while
the engine is busy, and those that arrive within the window of the first one to find it idle, when
they share their sampling settings apart from ``n``, ``max_tokens``, ``stop`` and ``seed`` (and a
seeded request only with requests of the same seed and ``n``). Each answer is the one the request
gets alone: its rows are cut to its own stops and budget, and a seeded row's noise is keyed by its
seed and sample index, never by its place in the batch. A request refused (400) never reaches the
batch. Without a window, requests are served one at a time, each as its own `generate` call. Either
way the engine runs under the service's `lock`, which a weight reload takes too: new weights are
never loaded in the middle of a (batched) call, and each answer records the version that sampled it.

A `recorder` (trainer.mode serve, `posttrain.trainer.serving`) receives every completion's token ids
and log-probs; the response then also carries them (``prompt_token_ids``, each choice's
``token_ids`` and ``logprobs``, as vLLM returns them with ``return_token_ids``), and the request's
temperature is replaced by the served policy's (the trainer's log-probs assume it). Further routes
(`make_server`'s ``routes``) answer JSON with JSON; every failure is an HTTP error with a message,
never a dead server.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import torch

from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import RolloutEngine, SamplingParams
from posttrain.rollout.batching import CallBatcher
from posttrain.rollout.chat_parsing import ChatParsing, split_reasoning, template_messages, tool_calls_of

_KNOWN = {"model", "messages", "tools", "tool_choice", "n", "temperature", "top_p", "max_tokens",
          "max_completion_tokens", "stop", "seed", "logprobs", "stream", "stream_options", "user", "chat_template_kwargs"}


class RequestError(ValueError):
    """A request the server answers with 400 (or the subclass's `status`) and this message."""

    status = 400


class NotFound(RequestError):
    """A request naming something the server does not hold (404)."""

    status = 404


class Unavailable(RequestError):
    """A request the server cannot carry out now, through no fault of the request (503)."""

    status = 503


#: The serving endpoints' batch window (as the agent function's endpoint's): long enough for requests
#: sent together to meet, short beside one decode.
BATCH_WINDOW_S = 0.002

#: (completion id, prompt token ids, the engine's output rows, weights version that sampled them)
Recorder = Callable[[str, list[int], RolloutBatch, int], None]


def sampling_from(body: dict[str, Any]) -> SamplingParams:
    """SamplingParams of a chat-completions request (OpenAI's defaults: temperature 1, n 1)."""
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise RequestError(f"unsupported field(s): {', '.join(unknown)}")
    if not isinstance(body.get("stream_options") or {}, dict):
        raise RequestError("stream_options: an object such as {\"include_usage\": true}")
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

    def __init__(self, engine: RolloutEngine, tokenizer: Any, model_name: str, *, recorder: Recorder | None = None,
                 temperature: float | None = None, parsing: ChatParsing = ChatParsing(),
                 template_kwargs: dict[str, Any] | None = None, batch_window: float | None = None, max_batch: int | None = None):
        """`recorder`: called with every completion (see the module docstring); `temperature`: the
        sampling temperature every request gets, whatever it asks (None: the request's); `parsing`:
        how the text becomes reasoning, content and tool calls (posttrain.rollout.chat_parsing);
        `template_kwargs`: variables every render of the chat template gets (e.g. enable_thinking),
        a request's own ``chat_template_kwargs`` over them; `batch_window`: seconds the first request
        to find the engine idle waits for others to share its `generate` call (None: one request per
        call; the module docstring), `max_batch` requests at most per call (None: no limit)."""
        self.engine, self.tokenizer, self.model_name = engine, tokenizer, model_name
        self.recorder, self.temperature, self.parsing = recorder, temperature, parsing
        self.template_kwargs = dict(template_kwargs or {})
        self.lock = threading.Lock()  # engines decode one batch at a time; weight loads take it too
        # every leader waits the whole window: unlike the agent endpoint's episodes, the requests on
        # their way are not known (a lone request pays the window, 2 ms by default)
        self.batcher = None if batch_window is None else CallBatcher(tokenizer, batch_window, max_batch)

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "posttrain"}]}

    def generate(self, prompts: PromptBatch, params: SamplingParams) -> RolloutBatch:
        """One engine call at the weights loaded now (the batcher's target): under `lock`, so a
        weight reload waits for it to end."""
        with self.lock:
            return self.engine.generate(prompts, params, expected_version=self.engine.weights_version)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.temperature is not None:  # the served policy's temperature: its rows are trained at it
            body = {**body, "temperature": self.temperature}
        params = sampling_from(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages: a non-empty list of {role, content} is required")
        parse_tools = self._tool_choice(body)
        extra = body.get("chat_template_kwargs") or {}
        if not isinstance(extra, dict):
            raise RequestError("chat_template_kwargs: an object of chat-template variables, such as {\"enable_thinking\": false}")
        try:
            text = self.tokenizer.apply_chat_template(template_messages(messages), tools=body.get("tools") or None,
                                                      add_generation_prompt=True, tokenize=False, **{**self.template_kwargs, **extra})
        except Exception as err:  # the template's own message (unknown role, ...)
            raise RequestError(f"messages: the chat template refused them: {err}") from None
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        # engines key sampling by (seed, prompt uid, sample): a seeded request repeats with a fixed
        # uid, an unseeded one draws anew with a fresh uid
        uid = "seeded" if params.seed is not None else uuid.uuid4().hex
        prompt = PromptBatch(torch.tensor([ids]), torch.ones(1, len(ids)), uid=[uid])
        out = self.generate(prompt, params) if self.batcher is None else self.batcher.submit(self, prompt, params)
        # the version that sampled it, read from the rows: a reload may follow the engine call at once
        version = int(out.weights_version[0]) if len(out) else self.engine.weights_version
        recording = self.recorder is not None
        choices, completion_tokens = [], 0
        for i in range(len(out)):
            n = int(out.response_mask[i].sum())
            tokens = out.response_ids[i, :n].tolist()
            completion_tokens += n
            choices.append(self._choice(i, tokens, out.rollout_logprobs[i, :n].tolist(), params,
                                        bool(body.get("logprobs")) or recording, parse_tools))
            if recording:
                choices[-1]["token_ids"] = tokens
        answer = {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model_name, "choices": choices,
            "usage": {"prompt_tokens": len(ids), "completion_tokens": completion_tokens, "total_tokens": len(ids) + completion_tokens},
        }
        if recording:  # recorded before the answer leaves: feedback may follow at once; the sampled ids, whatever was parsed
            self.recorder(answer["id"], ids, out, int(version))
            answer["prompt_token_ids"] = ids
        return answer

    def _tool_choice(self, body: dict[str, Any]) -> bool:
        """Whether the completions' tool calls are parsed: a request with ``tools`` and
        ``tool_choice`` auto (OpenAI's default when tools are given). The rest is refused as vLLM
        refuses it: auto without a parser or with auto tool choice off, and ``required`` or a named
        function (vLLM forces those with constrained decoding, which posttrain's engines lack)."""
        tools, choice = body.get("tools"), body.get("tool_choice")
        if tools is not None and not isinstance(tools, list):
            raise RequestError("tools: a list of {\"type\": \"function\", \"function\": {name, description, parameters}}")
        if not tools:
            if choice not in (None, "none"):
                raise RequestError(f"tool_choice {choice!r} needs tools: the request has none")
            return False
        choice = "auto" if choice is None else choice
        if choice == "none":  # the tools are shown to the model, its text is answered as text
            return False
        if choice == "auto":
            p = self.parsing
            if not p.enable_auto_tool_choice or p.tool_call_parser is None:
                raise RequestError(f'"auto" tool choice needs {p.setting} set on this server (now: auto tool choice '
                                   f'{"on" if p.enable_auto_tool_choice else "off"}, tool-call parser {p.tool_call_parser or "none"}); '
                                   'or send tool_choice "none"')
            return True
        if choice == "required" or isinstance(choice, dict):
            raise RequestError(f"tool_choice {json.dumps(choice)}: forcing a tool call needs constrained decoding, which posttrain's "
                               'engines do not do; send "auto" (the model decides) or "none"')
        raise RequestError(f'tool_choice: expected "auto", "none", "required" or {{"type": "function", ...}}, got {choice!r}')

    def _choice(self, index: int, tokens: list[int], logprobs: list[float], params: SamplingParams, with_logprobs: bool,
                parse_tools: bool) -> dict[str, Any]:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        hit = next((s for s in params.stop if text.endswith(s)), None)
        if hit is not None:  # OpenAI leaves the stop sequence out of the content
            text = text[: len(text) - len(hit)]
        ended = hit is not None or len(tokens) < params.max_new_tokens or (tokens and tokens[-1] in _eos_ids(self.tokenizer, self.engine))
        reasoning, content = split_reasoning(self.parsing.reasoning_parser, text)
        calls: list[dict[str, Any]] = []
        if parse_tools and content is not None:  # tool calls are read from the text after the reasoning, as vLLM does
            content, calls = tool_calls_of(self.parsing.tool_call_parser, content)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
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


Route = Callable[[dict[str, Any]], dict[str, Any]]


def stream_chunks(answer: dict[str, Any], include_usage: bool = False) -> list[dict[str, Any]]:
    """A chat completion as the chunks of a stream: one per choice carrying its whole message (and
    the token ids and log-probs it has), the first with the prompt's token ids when recorded."""
    head = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"], "model": answer["model"]}
    chunks = []
    for choice in answer["choices"]:
        delta = dict(choice["message"])
        if "tool_calls" in delta:  # a streamed tool call carries its index among the message's calls
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(delta["tool_calls"])]
        part = {"index": choice["index"], "delta": delta, "finish_reason": choice["finish_reason"]}
        part.update({k: choice[k] for k in ("logprobs", "token_ids") if k in choice})
        chunks.append({**head, "choices": [part]})
    if "prompt_token_ids" in answer and chunks:
        chunks[0]["prompt_token_ids"] = answer["prompt_token_ids"]
    if include_usage:
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return chunks


#: A path prefix's own service: (the service, the rest of the path), or None when the path has no such prefix
Scopes = Callable[[str], "tuple[Any, str] | None"]


def make_server(service: ChatService, host: str = "127.0.0.1", port: int = 8000, *,
                routes: dict[str, Route] | None = None, get_routes: dict[str, Callable[[], dict[str, Any]]] | None = None,
                scopes: Scopes | None = None) -> ThreadingHTTPServer:
    """An HTTP server answering the two routes with `service`, and `routes` (POST path -> handler of
    the JSON body) and `get_routes` (GET path -> handler) beside them (call `serve_forever()`).
    `scopes(path)` may give a path prefix a service of its own (anything with `complete(body)` and
    `models()`): ``/agent/7/v1/chat/completions`` answered by episode 7's (posttrain.rollout.agent_fn);
    it raises `NotFound` for a prefix it knows no service for."""
    posts: dict[str, Route] = {"/v1/chat/completions": service.complete, **(routes or {})}
    gets: dict[str, Callable[[], dict[str, Any]]] = {"/v1/models": service.models, **(get_routes or {})}
    listing = ", ".join([f"GET {p}" for p in gets] + [f"POST {p}" for p in posts])

    def lookup(path: str, post: bool) -> tuple[Any, Any]:
        """(route or None, the service whose chat route it may be) of a request path."""
        path = path.rstrip("/")
        scoped = scopes(path) if scopes is not None else None
        if scoped is None:
            return (posts if post else gets).get(path), service
        own, rest = scoped
        table = {"/v1/chat/completions": own.complete} if post else {"/v1/models": own.models}
        return table.get(rest.rstrip("/")), own

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                route, _ = lookup(self.path, post=False)
            except RequestError as err:
                self._send(err.status, _error(str(err), "not_found"))
                return
            if route is None:
                self._send(404, _error(f"no route {self.path}; this server has {listing}", "not_found"))
            else:
                self._answer(lambda: route())

        def do_POST(self) -> None:  # noqa: N802
            try:
                route, owner = lookup(self.path, post=True)
            except RequestError as err:
                self._send(err.status, _error(str(err), "not_found"))
                return
            if route is None:
                self._send(404, _error(f"no route {self.path}; this server has {listing}", "not_found"))
                return

            streamed: list[bool] = []  # a chat completion asked for as a stream

            def call() -> dict[str, Any]:
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as err:
                    raise RequestError(f"the body is not JSON: {err}") from None
                if not isinstance(body, dict):
                    raise RequestError("the body must be a JSON object")
                if route == owner.complete and body.get("stream"):
                    streamed.append(bool((body.get("stream_options") or {}).get("include_usage")))
                return route(body)
            self._answer(call, streamed)

        def _answer(self, call: Callable[[], dict[str, Any]], streamed: list[bool] = []) -> None:  # noqa: B006 (read only)
            try:
                payload = call()
            except RequestError as err:
                kind = {404: "not_found", 503: "unavailable"}.get(err.status, "invalid_request_error")
                self._send(err.status, _error(str(err), kind))
            except Exception as err:  # a bug or a failing engine: this request fails, the server serves on
                self._send(500, _error(f"internal error: {type(err).__name__}: {err}", "internal_error"))
            else:
                if streamed:
                    self._send_events(stream_chunks(payload, streamed[0]))
                else:
                    self._send(200, payload)

        def _send_events(self, chunks: list[dict[str, Any]]) -> None:
            data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

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
