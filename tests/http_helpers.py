"""Calling a test's HTTP server (posttrain serve, trainer.mode serve, auxiliary models) the way a client
would, and an engine that answers every prompt with a fixed text to serve behind it."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import torch

from posttrain.records import PromptBatch, RolloutBatch


def call(port, path, body=None, raw=None):
    """(status, parsed JSON) of a GET (no body) or a POST of `body` as JSON, or of the bytes `raw` as they are."""
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def ask(text, **kw):
    """A chat-completions body: one user message, 6 new tokens at most, and `kw`."""
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 6, **kw}


def together(port, bodies):
    """The (status, JSON) answers of `bodies` POSTed to /v1/chat/completions at once, one thread each
    released together (so a batching server sees them concurrently), in the order of `bodies`."""
    answers = [None] * len(bodies)
    gate = threading.Barrier(len(bodies))

    def one(i):
        gate.wait()
        answers[i] = call(port, "/v1/chat/completions", bodies[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def rows(answer):
    """(token ids, content, finish reason) of each choice of a 200 answer."""
    status, body = answer
    assert status == 200, body
    return [(c["token_ids"], c["message"]["content"], c["finish_reason"]) for c in body["choices"]]


class ScriptedEngine:
    """Answers every prompt with a fixed text (the tool-call path and the judges need a model that writes
    one) and records the sampling parameters it was asked for."""

    device = torch.device("cpu")
    weights_version = 0

    def __init__(self, tokenizer, text):
        self.ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.eos_token_ids = [self.ids[-1]]
        self.params = []

    def generate(self, prompts: PromptBatch, params, *, expected_version, seed=None) -> RolloutBatch:
        self.params.append(params)
        B, T = len(prompts) * params.n, len(self.ids)
        return RolloutBatch(
            prompt_ids=prompts.input_ids.repeat(params.n, 1), prompt_mask=prompts.attention_mask.repeat(params.n, 1),
            response_ids=torch.tensor([self.ids] * B), response_mask=torch.ones(B, T), rollout_logprobs=torch.full((B, T), -0.5),
            weights_version=torch.zeros(B, dtype=torch.long), group_index=["u"] * B, data_source=[""] * B,
            ground_truth=[None] * B, extra_info=[{}] * B, raw_prompt=[""] * B,
        )
