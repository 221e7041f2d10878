"""A user's agent function over the loopback endpoint: calls recorded exactly as the engine saw and
sampled them, one row per call with the episode's reward, and failures that end an episode, not the run."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
import torch

from posttrain.models.tiny import make_tiny_model
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.rollout import HFEngine
from posttrain.rollout.agent_endpoint import AgentEndpoint, PolicySampling
from posttrain.rollout.agent_fn import AgentError, AgentLimits, AgentTask, check_result, load_agent_function, run_agent_episodes
from posttrain.rollout.agent_rows import episode_rows
from posttrain.rollout.base import SamplingParams
from posttrain.errors import ConfigError


def post(base_url, body):
    request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def two_calls(base_url, row):
    """A fake agent: asks, then asks again with its first answer in the history; reward from the row."""
    messages = [{"role": "user", "content": row["question"]}]
    first = post(base_url, {"model": "any", "messages": messages, "max_tokens": 4})
    messages += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]}, {"role": "user", "content": "again"}]
    second = post(base_url, {"model": "any", "messages": messages, "max_tokens": 3})
    seen.append((first, second))
    return {"reward": row["score"], "turns": 2}


seen: list = []


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(make_tiny_model(tmp_path_factory.mktemp("m"), layers=1, hidden=32, heads=4)).eval()
    tokenizer = build_tiny_tokenizer()
    hf = HFEngine(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[], tokenizer=tokenizer)
    endpoint = AgentEndpoint(tokenizer, "policy")
    params = SamplingParams(temperature=0.7, max_new_tokens=5)
    endpoint.set_policy(PolicySampling(lambda p, sp: hf.generate(p, sp, expected_version=0), 0, params, 200))
    yield model, tokenizer, endpoint
    endpoint.shutdown()


def tasks(scores, n=2):
    return [AgentTask(f"s1-{i}", s, {"question": f"q{i}", "score": score}, i) for i, score in enumerate(scores) for s in range(n)]


def test_each_call_is_a_row_with_the_engines_ids_and_logprobs_and_the_episodes_reward(engine):
    model, tokenizer, endpoint = engine
    seen.clear()
    episodes = run_agent_episodes(two_calls, "fake:two_calls", tasks([1.0, 0.0]), endpoint, AgentLimits(max_concurrency=2), "s1")
    batch, scores = episode_rows(episodes, tokenizer.pad_token_id)
    assert len(batch) == 8 and [e.metrics for e in episodes] == [{"turns": 2.0}] * 4
    assert scores.tolist() == [1.0] * 4 + [0.0] * 4  # every call carries its episode's reward
    assert batch.group_index == ["s1-0"] * 4 + ["s1-1"] * 4  # the row's n episodes are one group
    assert [x["call"] for x in batch.extra_info] == [0, 1] * 4
    # the recorded rows are what the endpoint answered: the templated prompt, the sampled ids and log-probs
    rows = {(tuple(ids[m > 0].tolist()), tuple(r[k > 0].tolist())): b
            for b, (ids, m, r, k) in enumerate(zip(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask))}
    assert len(seen) == 4 and len(rows) == 8
    for first, second in seen:
        for answer, budget in ((first, 4), (second, 3)):
            choice = answer["choices"][0]
            b = rows[(tuple(answer["prompt_token_ids"]), tuple(choice["token_ids"]))]  # the row holds the call's ids
            n = int(batch.response_mask[b].sum())
            assert n == len(choice["token_ids"]) == budget  # no EOS in this engine: the max_tokens asked
            assert batch.rollout_logprobs[b, :n].tolist() == pytest.approx([c["logprob"] for c in choice["logprobs"]["content"]])
            assert batch.response_mask[b, n:].sum() == 0  # padding is masked
    # the second call's prompt holds the first answer as the chat template renders it
    first, second = seen[0]
    history = [{"role": "user", "content": "q0"}, {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
               {"role": "user", "content": "again"}]
    text = tokenizer.apply_chat_template(history, add_generation_prompt=True, tokenize=False)
    assert second["prompt_token_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]
    # the log-probs are the policy's at the stage's temperature (0.7), as the trainer recomputes them
    b = 0
    ids = torch.cat([batch.prompt_ids[b][batch.prompt_mask[b] > 0], batch.response_ids[b][batch.response_mask[b] > 0]])
    with torch.no_grad():
        logits = model(ids[None]).logits[0, -int(batch.response_mask[b].sum()) - 1:-1] / 0.7
    expected = torch.log_softmax(logits.float(), -1).gather(-1, batch.response_ids[b, : logits.shape[0], None])[:, 0]
    assert torch.allclose(batch.rollout_logprobs[b, : logits.shape[0]], expected, atol=1e-4)


async def async_agent(base_url, row):
    await asyncio.sleep(0)
    return await asyncio.to_thread(two_calls, base_url, row)


def raises(base_url, row):
    post(base_url, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
    raise KeyError("no such tool")


async def hangs(base_url, row):
    await asyncio.sleep(30)


def no_calls(base_url, row):
    return 1.0


def bad_return(base_url, row):
    post(base_url, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
    return "great"


@pytest.mark.parametrize("fn, says", [
    (raises, "raised KeyError: 'no such tool'"), (hangs, "took longer than rollout.agent.timeout (0.3 s)"),
    (no_calls, "made no chat-completion call"), (bad_return, "returned 'great'; expected a finite number"),
])
def test_a_failing_episode_is_dropped_or_penalised_and_too_many_stop_the_run(engine, fn, says, caplog):
    _, tokenizer, endpoint = engine
    limits = AgentLimits(timeout=0.3, max_failure_rate=1.0)
    (episode,) = run_agent_episodes(fn, "my_agent.py:run", tasks([1.0], n=1), endpoint, limits, "s2")
    assert episode.reward is None and says in episode.failed and "agent function my_agent.py:run (row 0, sample 0)" in episode.failed
    assert len(episode_rows([episode], tokenizer.pad_token_id)[0]) == 0  # dropped: no rows
    assert "episode dropped" in caplog.text
    penalised = run_agent_episodes(fn, "my_agent.py:run", tasks([1.0], n=1), endpoint, AgentLimits(timeout=0.3, failure_penalty=-1.0, max_failure_rate=1.0), "s3")
    made_calls = fn in (raises, bad_return)
    assert penalised[0].reward == (-1.0 if made_calls else None)  # the calls it made train with the penalty
    with pytest.raises(AgentError, match=r"\(row 0, sample 0\).*1 of 1 episodes of this step failed, more than rollout.agent.max_failure_rate 0.5"):
        run_agent_episodes(fn, "my_agent.py:run", tasks([1.0], n=1), endpoint, AgentLimits(timeout=0.3, max_failure_rate=0.5), "s4")


def test_async_agents_and_a_closed_episode_url(engine):
    _, tokenizer, endpoint = engine
    episodes = run_agent_episodes(async_agent, "a:b", tasks([0.5], n=2), endpoint, AgentLimits(max_concurrency=2), "s5")
    assert [e.reward for e in episodes] == [0.5, 0.5] and all(len(e.record.calls) == 2 for e in episodes)
    with pytest.raises(urllib.error.HTTPError) as err:  # an episode's URL answers only while it runs
        post(endpoint.base_url("s5-0"), {"messages": [{"role": "user", "content": "late"}]})
    assert err.value.code == 404 and "has ended" in json.loads(err.value.read())["error"]["message"]


def test_results_and_loading(tmp_path):
    assert check_result(2) == (2.0, {}) and check_result({"reward": 1, "calls": 3}) == (1.0, {"calls": 3.0})
    for bad in (True, float("nan"), {"score": 1.0}, {"reward": 1.0, "note": "x"}, None):
        with pytest.raises(ValueError):
            check_result(bad)
    path = tmp_path / "agent.py"
    path.write_text("def run(base_url, row):\n    return 1.0\n\ndef lonely():\n    pass\n")
    assert load_agent_function(f"{path}:run", "k")("u", {}) == 1.0
    with pytest.raises(ConfigError, match=r"defines no function 'nope'; its functions are \['lonely', 'run'\]"):
        load_agent_function(f"{path}:nope", "rollout.agent.function")
    with pytest.raises(ConfigError, match="must take \\(base_url, row\\)"):
        load_agent_function(f"{path}:lonely", "rollout.agent.function")
    with pytest.raises(ConfigError, match="expected 'module:function'"):
        load_agent_function("run", "rollout.agent.function")


def test_max_concurrency_bounds_the_episodes_running_at_once(engine):
    _, _, endpoint = engine
    running, peaks = [0], []

    async def slow(base_url, row):
        running[0] += 1
        peaks.append(running[0])
        await asyncio.sleep(0.05)
        running[0] -= 1
        await asyncio.to_thread(post, base_url, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1})
        return 0.0

    for limit in (1, 3):
        peaks.clear()
        run_agent_episodes(slow, "a:slow", tasks([0.0] * 4, n=1), endpoint, AgentLimits(max_concurrency=limit), f"c{limit}")
        assert max(peaks) == limit


def test_kwargs_reach_the_function_with_every_episode_and_a_name_it_does_not_take_is_refused(tmp_path):
    (tmp_path / "kw_agent.py").write_text("def run(base_url, row, *, scale=1.0):\n    return row['x'] * scale\n")
    spec = f"{tmp_path}/kw_agent.py:run"
    assert load_agent_function(spec, "rollout.agent.function")("u", {"x": 2.0}) == 2.0
    assert load_agent_function(spec, "rollout.agent.function", {"scale": 3.0})("u", {"x": 2.0}) == 6.0  # rollout.agent.kwargs
    with pytest.raises(ConfigError, match=r"keyword arguments \['shift'\] \(rollout.agent.kwargs\)"):
        load_agent_function(spec, "rollout.agent.function", {"shift": 1})
