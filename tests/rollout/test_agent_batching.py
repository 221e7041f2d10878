"""Concurrent agent-function calls batched into one engine call (posttrain.rollout.agent_endpoint's
CallBatcher): one `generate` for the calls waiting together, and each call's answer and recording
exactly what it would have been alone (its own prompt, n, max_tokens, stop and seed)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
import torch

from posttrain.models.tiny import make_tiny_model
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.rollout import HFEngine
from posttrain.rollout.agent_endpoint import AgentEndpoint, PolicySampling
from posttrain.rollout.base import SamplingParams


def post(base_url, body):
    request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(make_tiny_model(tmp_path_factory.mktemp("m"), layers=2, hidden=32, heads=4)).eval()
    tokenizer = build_tiny_tokenizer()
    return HFEngine(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[], tokenizer=tokenizer), tokenizer


def endpoint_of(hf, params, window):
    engine, tokenizer = hf
    calls = []

    def generate(prompts, sp):  # counts engine calls and the rows of each
        calls.append(len(prompts) * sp.n)
        return engine.generate(prompts, sp, expected_version=0)

    endpoint = AgentEndpoint(tokenizer, "policy", batch_window=window)
    endpoint.set_policy(PolicySampling(generate, 0, params, 400))
    return endpoint, calls


def together(endpoint, bodies, prefix):
    """Each body posted by an episode of its own, all at once; (answers, records) in order."""
    records = [endpoint.open(f"{prefix}-{i}") for i in range(len(bodies))]
    answers = [None] * len(bodies)
    start = threading.Barrier(len(bodies))

    def one(i):
        start.wait()
        answers[i] = post(endpoint.base_url(f"{prefix}-{i}"), bodies[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(len(bodies)):
        endpoint.close(f"{prefix}-{i}")
    return answers, records


def alone(endpoint, bodies, prefix):
    """Each body posted by its own episode, one after another."""
    answers, records = [], []
    for i, body in enumerate(bodies):
        records.append(endpoint.open(f"{prefix}-{i}"))
        answers.append(post(endpoint.base_url(f"{prefix}-{i}"), body))
        endpoint.close(f"{prefix}-{i}")
    return answers, records


def ask(text, **kw):
    return {"messages": [{"role": "user", "content": text}], **kw}


GREEDY = SamplingParams(temperature=0.8, do_sample=False, max_new_tokens=8)


def test_concurrent_calls_are_one_generate_and_each_row_is_what_it_would_be_alone(hf):
    # prompts of different lengths (left padding in the batch), n 1 and 2, budgets 3, 8 and 5
    bodies = [ask("hi", max_tokens=3), ask("a much longer question with many words in it", n=2),
              ask("two words", max_tokens=5), ask("x")]
    batched, calls = endpoint_of(hf, GREEDY, window=0.3)
    single, single_calls = endpoint_of(hf, GREEDY, window=0.0)
    try:
        got, got_records = together(batched, bodies, "b")
        want, want_records = alone(single, bodies, "a")
    finally:
        batched.shutdown()
        single.shutdown()
    assert calls == [5] and single_calls == [1, 2, 1, 1]  # one engine call holding every choice (n=2: two rows)
    assert batched.batcher.generate_calls == 1
    for g, w, gr, wr, budget in zip(got, want, got_records, want_records, (3, 8, 5, 8)):
        assert [len(c["token_ids"]) for c in g["choices"]] == [budget] * len(w["choices"])  # each its own max_tokens
        assert [c["token_ids"] for c in g["choices"]] == [c["token_ids"] for c in w["choices"]]
        assert [c["message"]["content"] for c in g["choices"]] == [c["message"]["content"] for c in w["choices"]]
        assert [c.prompt_ids for c in gr.calls] == [c.prompt_ids for c in wr.calls]
        assert [c.response_ids for c in gr.calls] == [c.response_ids for c in wr.calls]
        for a, b in zip(gr.calls, wr.calls):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4) and a.version == b.version == 0


def test_each_call_in_a_batch_stops_at_its_own_stop_string(hf):
    _, tokenizer = hf
    single, _ = endpoint_of(hf, GREEDY, window=0.0)
    batched, calls = endpoint_of(hf, GREEDY, window=0.3)
    try:
        (free,), _ = alone(single, [ask("stop here")], "f")
        tokens = free["choices"][0]["token_ids"]
        stop = tokenizer.decode(tokens[2:4], skip_special_tokens=True)  # text the answer reaches at its 4th token
        assert stop.strip() and stop not in tokenizer.decode(tokens[:3], skip_special_tokens=True)
        bodies = [ask("stop here", stop=[stop]), ask("stop here"), ask("other", stop="zzzz-never", max_tokens=6)]
        want, want_records = alone(single, bodies, "s")  # the engine's own stop handling, a call at a time
        got, got_records = together(batched, bodies, "t")
    finally:
        batched.shutdown()
        single.shutdown()
    assert calls == [3]
    assert len(got[0]["choices"][0]["token_ids"]) == 4 and got[0]["choices"][0]["finish_reason"] == "stop"
    assert len(got[1]["choices"][0]["token_ids"]) == 8 and got[1]["choices"][0]["finish_reason"] == "length"
    assert len(got[2]["choices"][0]["token_ids"]) == 6
    for g, w, gr, wr in zip(got, want, got_records, want_records):
        assert g["choices"][0]["token_ids"] == w["choices"][0]["token_ids"]
        assert g["choices"][0]["message"] == w["choices"][0]["message"]  # the stop string left out of the content
        assert [c.response_ids for c in gr.calls] == [c.response_ids for c in wr.calls]


def test_seeded_calls_keep_their_answer_in_any_batch_and_other_seeds_wait_for_their_own(hf):
    sampled = SamplingParams(temperature=1.0, max_new_tokens=6)
    batched, calls = endpoint_of(hf, sampled, window=0.3)
    single, _ = endpoint_of(hf, sampled, window=0.0)
    bodies = [ask("q one", seed=7, n=2), ask("q two", seed=7, n=2), ask("q three", seed=9), ask("q four"), ask("q five")]
    try:
        got, _ = together(batched, bodies, "k")
        want, _ = alone(single, bodies[:3], "w")
    finally:
        batched.shutdown()
        single.shutdown()
    # three engine calls, whichever comes first: seed 7 (two prompts x n 2), seed 9 (one row), the unseeded two
    assert sorted(calls) == [1, 2, 4]
    for g, w in zip(got[:3], want):  # a seeded call draws the same tokens batched or alone
        assert [c["token_ids"] for c in g["choices"]] == [c["token_ids"] for c in w["choices"]]
    assert got[0]["choices"][0]["token_ids"] != got[0]["choices"][1]["token_ids"]  # its n samples differ


def test_a_call_whose_episode_ends_while_it_waits_is_not_recorded_and_a_late_call_is_404(hf):
    endpoint, calls = endpoint_of(hf, GREEDY, window=0.5)
    record = endpoint.open("late-0")
    endpoint.open("late-1")  # still running, no call yet: the batch waits its window for it
    errors = []

    def call():
        try:
            post(endpoint.base_url("late-0"), ask("slow"))
        except urllib.error.HTTPError as err:
            errors.append((err.code, json.loads(err.read())["error"]["message"]))

    thread = threading.Thread(target=call)
    try:
        thread.start()
        threading.Event().wait(0.2)  # the call is in the gathering window
        endpoint.close("late-0")  # e.g. its episode timed out
        thread.join()
        endpoint.close("late-1")
        with pytest.raises(urllib.error.HTTPError) as late:
            post(endpoint.base_url("late-0"), ask("later"))
    finally:
        endpoint.shutdown()
    assert calls == [1] and record.calls == []  # generated with its batch, but neither recorded nor answered
    assert errors and errors[0][0] == 404 and "has ended" in errors[0][1]
    assert late.value.code == 404


def test_calls_of_two_policies_are_never_one_batch(hf):
    """A hung episode of the last step may still have a call waiting when the next step's policy is set."""
    engine, tokenizer = hf
    from posttrain.records import PromptBatch
    from posttrain.rollout.agent_endpoint import CallBatcher

    seen = {"old": [], "new": []}

    def policy(name):
        def generate(prompts, sp):
            seen[name].append(len(prompts))
            return engine.generate(prompts, sp, expected_version=0)
        return PolicySampling(generate, 0, GREEDY, 400)

    batcher, policies = CallBatcher(tokenizer, window=0.3), {"old": policy("old"), "new": policy("new")}
    prompt = PromptBatch(tokenizer("abc", return_tensors="pt")["input_ids"], torch.ones(1, 3), uid=["u"])
    outs, jobs = {}, [("old", 0), ("new", 0), ("new", 1)]
    gate = threading.Barrier(len(jobs))

    def call(name, i):
        gate.wait()  # all three wait within one gathering window
        outs[name, i] = batcher.submit(policies[name], prompt, GREEDY)

    threads = [threading.Thread(target=call, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"old": [1], "new": [2]}  # each policy's calls in a batch of their own
    assert batcher.generate_calls == 2 and len(outs) == 3 and all(len(o) == 1 for o in outs.values())


def test_a_lone_episode_does_not_wait_for_the_window(hf):
    import time

    endpoint, calls = endpoint_of(hf, GREEDY, window=5.0)
    try:
        start = time.perf_counter()
        alone(endpoint, [ask("solo")], "solo")
        took = time.perf_counter() - start
    finally:
        endpoint.shutdown()
    assert calls == [1] and took < 4.0  # every running episode already had its call waiting
