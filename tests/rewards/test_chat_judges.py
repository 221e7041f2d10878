"""Chat judges (ruler_judge, rubric_judge) over auxiliary models: the requests they send, the scores
they read, the fallback for a reply that does not parse, and the served endpoint they call."""

from __future__ import annotations

import os

import pytest

from posttrain.config.load import load_config
from posttrain.errors import ConfigError, DataError
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.rewards.auxiliary import chat, env_name, start_auxiliary
from posttrain.rewards.chat_judges import ChatJudgeSpec, chat_judge_spec, parse_rating, parse_scores
from posttrain.rewards.types import RewardInput
from http_helpers import ScriptedEngine


class Script:
    """A judge that answers each request with the next scripted reply and keeps the requests."""

    def __init__(self, *replies):
        self.replies, self.requests = list(replies), []

    def __call__(self, messages):
        self.requests.append(messages)
        return self.replies.pop(0)


def _group(uid, question, *responses, extra=None):
    return [RewardInput("t", r, None, extra, index=i, prompt=question, group=uid) for i, r in enumerate(responses)]


@pytest.mark.parametrize("reply, count, expected", [
    ("Answer 2 is right.\n[0.1, 0.8, 0.45]", 3, [0.1, 0.8, 0.45]),
    ("first [9, 9] then [0.5, 1]", 2, [0.5, 1.0]),  # the last list is the verdict
    ("[1.2, -0.3]", 2, [1.0, 0.0]),  # clipped to [0, 1]
    ("[0.5, 0.5, 0.5]", 2, None),  # one score per response, or none
    ("[0.5, high]", 2, None),
    ("[nan, 1]", 2, None),
    ("no list here", 1, None),
])
def test_ruler_reply_parsing(reply, count, expected):
    assert parse_scores(reply, count) == expected


@pytest.mark.parametrize("reply, expected", [
    ("Meets most criteria.\nRating: 8", 0.8), ('```json\n{"rating": 3}\n```', 0.3), ("Rating: 2 ... Rating: 9", 0.9),
    ("Rating: 11", None), ("Rating: 0", None), ("an eight", None),
])
def test_rubric_reply_parsing(reply, expected):
    assert parse_rating(reply) == expected


def test_ruler_judge_scores_each_group_in_one_request_and_falls_back_when_a_reply_does_not_parse():
    judge_chat = Script("B is best. [0.25, 1.0, 0.5]", "I cannot decide.")
    judge = ChatJudgeSpec("ruler_judge", "judge", {"instructions": "Answer in <answer> tags.", "fallback_score": 0.1}).build({}, judge_chat)
    samples = _group("a", "2+2?", "3", "<answer>4</answer><|im_end|>", "four") + _group("b", "3+3?", "6", "5")
    out = judge.score(samples)
    assert out.scores == [0.25, 1.0, 0.5, 0.1, 0.1]
    assert out.num_failures == 2 and out.extra["judge_parsed"] == [1.0, 1.0, 1.0, 0.0, 0.0]
    first = judge_chat.requests[0][1]["content"]  # the user turn: the task, its instructions and all three answers
    assert "2+2?\n\nAnswer in <answer> tags." in first and "Answer 2:\n<answer>4</answer>\n\nAnswer 3:\nfour" in first
    assert "<|im_end|>" not in first and "list of 3 scores" in first
    assert "list of 2 scores" in judge_chat.requests[1][1]["content"]


def test_rubric_judge_rates_each_response_against_its_row_s_rubric():
    rubric = {"rubric": [{"description": "names the capital", "weight": 2}, "is one sentence"]}
    judge_chat = Script("Rating: 7", "Looks fine.")
    judge = ChatJudgeSpec("rubric_judge", "judge", {"fallback_score": 0.25}).build({}, judge_chat)
    out = judge.score(_group("a", "Capital of France?", "Paris.", "It is Paris, a city.", extra=rubric))
    assert out.scores == [0.7, 0.25] and out.num_failures == 1 and out.extra["judge_parsed"] == [1.0, 0.0]
    user = judge_chat.requests[0][1]["content"]
    assert "Capital of France?" in user and "Response:\nParis." in user and "- (weight 2) names the capital\n- is one sentence" in user
    other_key = ChatJudgeSpec("rubric_judge", "judge", {"rubric_key": "criteria"}).build({}, Script("Rating: 5"))
    assert other_key.score(_group("a", "q", "r", extra={"criteria": "be brief"})).scores == [0.5]
    with pytest.raises(DataError, match=r"sample 0: a rubric_judge reads the row's rubric from extra_info.rubric"):
        judge.score(_group("a", "q", "r", extra={}))


def test_chat_judge_keys_are_checked():
    spec = chat_judge_spec("ruler_judge", {"model": "judge", "max_tokens": 64, "temperature": 0.7}, "reward.workers.w")
    assert spec == ChatJudgeSpec("ruler_judge", "judge", {"max_tokens": 64, "temperature": 0.7})
    with pytest.raises(ConfigError, match=r"reward.workers.w.reward_kwargs: a ruler_judge takes .*not rubric_key"):
        chat_judge_spec("ruler_judge", {"model": "judge", "rubric_key": "r"}, "reward.workers.w")
    with pytest.raises(ConfigError, match=r"reward_kwargs.max_tokens: expected a number >= 1, got 0"):
        chat_judge_spec("rubric_judge", {"model": "judge", "max_tokens": 0}, "reward.workers.w")


def test_auxiliary_models_are_served_on_loopback_and_their_urls_reach_reward_code(tmp_path):
    tokenizer = build_tiny_tokenizer()
    engines = {"judge": ScriptedEngine(tokenizer, "ok [0.5, 1]"), "helper": ScriptedEngine(tokenizer, "Rating: 9")}
    running = start_auxiliary({"judge": None, "helper": None}, engines={k: (e, tokenizer) for k, e in engines.items()})
    try:
        base = running.urls["judge"]
        assert base.startswith("http://127.0.0.1:") and base.endswith("/v1") and os.environ[env_name("judge")] == base
        assert chat("helper", [{"role": "user", "content": "hi"}], max_tokens=7, temperature=0) == "Rating: 9"
        assert engines["helper"].params[-1].max_new_tokens == 7 and not engines["helper"].params[-1].do_sample
        # a ruler judge built on the served model: the sampling keys reach the engine
        judge = ChatJudgeSpec("ruler_judge", "judge", {"max_tokens": 5, "temperature": 0.5}).build(running.urls)
        assert judge.score(_group("g", "q", "a", "b")).scores == [0.5, 1.0]
        asked = engines["judge"].params[-1]
        assert asked.max_new_tokens == 5 and asked.do_sample and asked.temperature == 0.5
    finally:
        running.stop()
    assert env_name("judge") not in os.environ
    with pytest.raises(ConfigError, match="POSTTRAIN_AUX_JUDGE_URL is unset"):
        chat("judge", [{"role": "user", "content": "hi"}])


def _yaml(tmp_path, text):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("body, message", [
    ("reward:\n  auxiliary_models: {Judge: {model_path: m}}\n", "reward.auxiliary_models.Judge: an auxiliary model's name must be lower-case"),
    ("reward:\n  auxiliary_models: {judge: {}}\n", "reward.auxiliary_models.judge.model_path: name the model"),
    ("reward:\n  workers: {w: {worker_cls: ruler_judge, tag_included: [t], reward_kwargs: {model: other}}}\n",
     "reward.workers.w.reward_kwargs.model: a ruler_judge calls an auxiliary model by name; 'other' is not one of reward.auxiliary_models (none is configured)"),
    ("reward:\n  auxiliary_models: {judge: {model_path: m}}\n  workers: {w: {worker_cls: rubric_judge, tag_included: [t], world_size: 2, reward_kwargs: {model: judge}}}\n",
     "reward.workers.w.world_size: a rubric_judge calls its auxiliary model's server from the scoring process"),
    ("reward:\n  launch_reward_fn_async: true\n  auxiliary_models: {judge: {model_path: m}}\n",
     "reward.launch_reward_fn_async: the auxiliary models (judge) generate in the training process"),
])
def test_auxiliary_model_config_is_checked_at_load(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        load_config(_yaml(tmp_path, body))


def test_an_auxiliary_model_s_path_dtype_and_engine_options_build_its_engine(monkeypatch):
    """build_engine goes through the LLM judge's engine builder (judge_config + EngineJudge, tested
    against vllm in tests/rewards/test_judge_engine.py); with free_cache_engine the served engine
    wakes for each request and sleeps after it."""
    import posttrain.rewards.judge_engine as judge_engine
    from posttrain.config.sections.reward import AuxiliaryModelConfig, JudgeEngineConfig
    from posttrain.rewards.auxiliary import build_engine

    calls, built = [], []

    class FakeEngine:
        def __init__(self):
            self.log = []

        def wake_up(self):
            self.log.append("wake")

        def sleep(self, level):
            self.log.append(f"sleep{level}")

        def generate(self, *args, **kwargs):
            self.log.append("generate")
            return "out"

    class FakeJudge:
        def __init__(self, cfg, *, dtype, seed, where):
            calls.append((cfg, dtype, seed))
            self.engine, self.tokenizer = FakeEngine(), "tok"
            self.sleeps = cfg.rollout.free_cache_engine and cfg.rollout.name != "hf"
            built.append(self.engine)

    monkeypatch.setattr(judge_engine, "EngineJudge", FakeJudge)
    options = dict(tensor_model_parallel_size=2, gpu_memory_utilization=0.3, max_model_len=2048, enforce_eager=False,
                   max_num_batched_tokens=4096, kwargs={"block_size": 32})
    model = AuxiliaryModelConfig(model_path="/models/judge", dtype="bf16", engine=JudgeEngineConfig(name="vllm", **options))
    engine, tokenizer = build_engine(model, seed=5)
    cfg, dtype, seed = calls[-1]
    assert (cfg.model.path, dtype, seed, cfg.rollout.name, tokenizer) == ("/models/judge", "bf16", 5, "vllm", "tok")
    assert cfg.rollout.engine_kwargs.vllm == {"block_size": 32}
    for key, value in options.items():
        if key != "kwargs":
            assert getattr(cfg.rollout, key) == value, key
    assert engine.generate("prompts") == "out" and built[-1].log == ["wake", "generate", "sleep1"]
    awake = AuxiliaryModelConfig(model_path="/models/judge", engine=JudgeEngineConfig(name="vllm", max_model_len=64, free_cache_engine=False))
    engine, _ = build_engine(awake)
    assert engine is built[-1] and calls[-1][1] == "fp32"  # served as built: no sleeping between requests
