"""The loopback OpenAI-compatible endpoint a user's agent function calls during an RL step
(`rollout.agent.function`, posttrain.rollout.agent_fn).

One HTTP server (posttrain.rollout.server's, standard library, 127.0.0.1, a free port) lives as long
as the stage. Every episode gets a base URL of its own, ``http://127.0.0.1:PORT/agent/<id>/v1``, so
calls made by concurrent episodes are told apart without the agent's help; a URL answers only while
its episode runs (afterwards: 404), so a timed-out agent's late calls are never recorded.

Each chat completion is one `generate` call of this step's rollout role, with the stage's sampling
(`rollout.temperature`, `top_p`, `top_k`, `do_sample`: the log-probs the trainer recomputes assume
them) and the request's own `n`, `stop`, `seed` and `max_tokens` (capped at the stage's response
length). Before the answer leaves, the call is recorded: the prompt's token ids exactly as the chat
template gave them to the engine, each choice's sampled ids and the engine's log-probs of them, and
the weights version. A request's tools and reasoning are read as `rollout.agent`'s tool_call_parser,
enable_auto_tool_choice and reasoning_parser say (posttrain.rollout.chat_parsing): that changes only
the JSON the agent reads, never the recorded ids.

Concurrent calls are batched (posttrain.rollout.batching's `CallBatcher`): the calls waiting for the engine (those that arrived
while it was busy, and those that arrive within `batch_window` seconds, 2 ms by default, of the
first one to find it idle; no wait when every running episode already has a call waiting) are
generated together in one `generate` call. Each call keeps its own prompt (left-padded in the batch;
the engines' masks and positions make a row's distribution the same as alone), `n`, `max_tokens` and
`stop`: the batch decodes up to its longest budget with the stage's own stops, and each row is then
cut where its own call would have ended (the token that completes one of its stop strings, or its
budget), so a recorded row is what a call of its own would have drawn. Unseeded calls share one
batch, each choice a row with a fresh sampling key. A call with a `seed` is batched only with calls
of the same seed and `n` (the engines key sampling by seed, prompt uid and sample index, so a seeded
call keeps the same answer in any batch); calls with other seeds wait for a batch of their own.
Calls of different policies (a hung episode of the last step) never share a batch.
Every other sampling argument is the stage's (above), the same for all calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.batching import CallBatcher
from posttrain.rollout.chat_parsing import ChatParsing
from posttrain.rollout.server import ChatService, NotFound, RequestError, make_server

logger = logging.getLogger(__name__)

__all__ = ["AgentEndpoint", "CallBatcher", "EpisodeRecord", "PolicySampling", "RecordedCall"]

Generate = Callable[[PromptBatch, SamplingParams], RolloutBatch]


@dataclass(frozen=True)
class RecordedCall:
    """One choice of one chat completion, as the engine saw and sampled it."""

    prompt_ids: list[int]  # the templated prompt's ids (P_k,)
    response_ids: list[int]  # the sampled ids, EOS included when drawn (T_k,)
    logprobs: list[float]  # the engine's log pi of each sampled id (T_k,)
    version: int  # weights version that sampled it


@dataclass
class EpisodeRecord:
    """What one episode's base URL recorded, in call order (a call with n choices gives n entries)."""

    calls: list[RecordedCall] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why the endpoint answered a call of it with an error


@dataclass(frozen=True)
class PolicySampling:
    """This step's engine and the sampling every call gets."""

    generate: Generate
    version: int
    params: SamplingParams  # the stage's rollout sampling (its n and max_new_tokens are replaced per request)
    max_context: int  # prompt + response tokens a call may hold (data.max_prompt_length + response length)


class _Engine:
    """A rollout engine as ChatService sees it: this step's weights under the stage's sampling,
    each call queued into the endpoint's batcher."""

    def __init__(self, policy: PolicySampling, eos_token_ids: Any, batcher: CallBatcher):
        self.policy, self.weights_version, self.eos_token_ids, self.batcher = policy, policy.version, eos_token_ids, batcher

    def generate(self, prompts: PromptBatch, params: SamplingParams, expected_version: int | None = None) -> RolloutBatch:
        p = self.policy
        length = int(prompts.attention_mask.sum())
        room = p.max_context - length
        if room < 1:
            raise RequestError(f"the conversation is {length} tokens after the chat template, and the policy holds {p.max_context} "
                               "(data.max_prompt_length + the response length) with room for at least one new token: shorten it")
        # the stage's sampling, so that the recorded log-probs are the ones the trainer recomputes;
        # the request decides how many choices, where to stop and how long they may be
        sampling = dataclasses.replace(p.params, n=params.n, stop=tuple(dict.fromkeys(p.params.stop + params.stop)), seed=params.seed,
                                       max_new_tokens=min(params.max_new_tokens, room))
        return self.batcher.submit(p, prompts, sampling)


class _EpisodeService:
    """Episode `eid`'s chat service: its calls recorded into `record`, max_tokens capped."""

    def __init__(self, chat: ChatService, cap: int, record: EpisodeRecord, eid: str = "", log_requests: bool = False):
        self.chat, self.cap, self.record = chat, cap, record
        self.eid, self.log_requests = eid, log_requests

    def models(self) -> dict[str, Any]:
        return self.chat.models()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        try:
            budget = min(int(asked), self.cap) if asked else self.cap
        except (TypeError, ValueError):
            self.record.refused.append(f"max_tokens: expected a whole number, got {asked!r}")
            raise RequestError(self.record.refused[-1]) from None
        body = {k: v for k, v in body.items() if k != "max_completion_tokens"}
        try:
            answer = self.chat.complete({**body, "max_tokens": budget})
        except RequestError as err:  # kept for the failure message: an agent's HTTP client seldom shows the body
            self.record.refused.append(str(err))
            if self.log_requests:
                logger.info("agent endpoint: episode %s: request refused: %s", self.eid, err)
            raise
        if self.log_requests:  # rollout.agent.log_requests: one line per answered request
            usage = answer.get("usage") or {}
            finish = [c.get("finish_reason") for c in answer.get("choices") or []]
            logger.info("agent endpoint: episode %s: %d messages, %d tools, max_tokens %d -> %s prompt + %s completion tokens, "
                        "finish %s", self.eid, len(body.get("messages") or []), len(body.get("tools") or []), budget,
                        usage.get("prompt_tokens"), usage.get("completion_tokens"), finish)
        return answer


class AgentEndpoint:
    """The stage's endpoint; `open(eid)` gives an episode its URL, `close(eid)` takes it away."""

    def __init__(self, tokenizer: Any, model_name: str, eos_token_ids: Any = None, batch_window: float = 0.002,
                 max_batch: int | None = None, parsing: ChatParsing = ChatParsing(), template_kwargs: dict[str, Any] | None = None,
                 log_requests: bool = False):
        """`batch_window`: seconds the first call to find the engine idle waits for others to share
        its batch (0: only calls already waiting; the module docstring); `max_batch`: CallBatcher's;
        `parsing` and `template_kwargs`: every episode's ChatService's (tool calls, reasoning, chat
        template variables; posttrain.rollout.chat_parsing); `log_requests`: a log line (INFO) per
        request an episode makes (rollout.agent.log_requests)."""
        self.log_requests = log_requests
        self.tokenizer, self.model_name, self.eos_token_ids = tokenizer, model_name, eos_token_ids
        self.parsing, self.template_kwargs = parsing, dict(template_kwargs or {})
        self.lock = threading.Lock()  # guards `episodes`; the engine's calls go through `batcher`
        self.batcher = CallBatcher(tokenizer, batch_window, max_batch, lambda: len(self.episodes))
        self.episodes: dict[str, tuple[_EpisodeService, EpisodeRecord]] = {}
        self.policy: PolicySampling | None = None
        self.server = make_server(ChatService(_Closed(), tokenizer, model_name), "127.0.0.1", 0, scopes=self._scope)
        # the standard library listens with a backlog of 5: more episodes connecting at once than
        # the accept loop takes in time were refused (a failed episode) on a busy machine
        self.server.socket.listen(1024)
        self.thread = threading.Thread(target=self.server.serve_forever, name="agent endpoint", daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def base_url(self, eid: str) -> str:
        return f"http://127.0.0.1:{self.port}/agent/{eid}/v1"

    def set_policy(self, policy: PolicySampling) -> None:
        """The engine, weights version and sampling of the episodes opened from now on."""
        self.policy = policy

    def open(self, eid: str) -> EpisodeRecord:
        if self.policy is None:
            raise RuntimeError("set_policy before opening episodes")
        record = EpisodeRecord()

        def recorder(call_id: str, prompt_ids: list[int], out: RolloutBatch, version: int) -> None:
            if eid not in self.episodes:  # the episode ended while its call was in a batch: not recorded
                raise NotFound(f"episode {eid} has ended (finished, failed or timed out): its calls are no longer served or recorded")
            for i in range(len(out)):
                n = int(out.response_mask[i].sum())  # right-padded after EOS: the first n tokens are the response
                record.calls.append(RecordedCall(list(prompt_ids), out.response_ids[i, :n].tolist(),
                                                 out.rollout_logprobs[i, :n].tolist(), version))

        chat = ChatService(_Engine(self.policy, self.eos_token_ids, self.batcher), self.tokenizer, self.model_name,
                           recorder=recorder, temperature=self.policy.params.temperature, parsing=self.parsing,
                           template_kwargs=self.template_kwargs)
        chat.lock = contextlib.nullcontext()  # the batcher serialises the engine; calls must meet there to share a batch
        with self.lock:
            self.episodes[eid] = (_EpisodeService(chat, self.policy.params.max_new_tokens, record, eid, self.log_requests), record)
        return record

    def close(self, eid: str) -> None:
        """The episode's URL answers 404 from now on, and a call of it still in a batch is neither
        recorded nor answered (404)."""
        with self.lock:
            self.episodes.pop(eid, None)

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _scope(self, path: str) -> tuple[_EpisodeService, str] | None:
        parts = path.split("/", 3)  # "", "agent", eid, rest
        if len(parts) < 3 or parts[1] != "agent":
            return None
        found = self.episodes.get(parts[2])
        if found is None:
            raise NotFound(f"episode {parts[2]} has ended (finished, failed or timed out): its calls are no longer served or recorded")
        return found[0], "/" + (parts[3] if len(parts) > 3 else "")


class _Closed:
    """The endpoint's root: every call belongs to an episode's URL."""

    weights_version = 0

    def generate(self, *args: Any, **kwargs: Any) -> RolloutBatch:
        raise NotFound("call the base URL your agent function was given (http://127.0.0.1:PORT/agent/<episode>/v1)")
