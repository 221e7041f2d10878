"""The LLM judge worker: prompts filled from the sample, scores parsed from the judge's text, an
answer without a score counted and handled by reward.on_error; a tiny model judging through the
HF engine; the worker's keys checked at load."""

from __future__ import annotations

import json
import shutil

import pytest

from posttrain.config.load import load_config
from posttrain.errors import ConfigError, ModelError, RewardFunctionError
from posttrain.models.tiny import make_tiny_model
from posttrain.config.sections.reward import JudgeEngineConfig
from posttrain.rewards.judge import LLMJudge, judge_spec, parse_verdict, template_of
from posttrain.rewards.judge_engine import EngineJudge, judge_config
from posttrain.rewards.types import RewardInput

YES_NO = [
    ("YES", 1.0), ("yes", 1.0), ("No.", 0.0), ("**NO**", 0.0), ("Yes, they match.", 1.0), ("No - yes would be wrong", 0.0),
    ("nobody knows", None), ("eyes", None), ("", None), ("I cannot tell", None),
]
SCORES = [
    ("Score: 7", 0.7), ("score = 10", 1.0), ("Score:0", 0.0), ("The answer is fine.\nScore: 8.5", 0.85),
    ("3 errors... Score: 4", 0.4), ("6", 0.6), ("Score: 11", None), ("Score: -1", None), ("no number", None),
]


@pytest.mark.parametrize("parser, answer, expected", [("yes_no", a, e) for a, e in YES_NO] + [("score_0_10", a, e) for a, e in SCORES])
def test_verdict_parsing_table(parser, answer, expected):
    got = parse_verdict(answer, parser)
    assert got == (pytest.approx(expected) if expected is not None else None)


def _samples():
    return [
        RewardInput("qa", "<think>hmm</think>The sum is 75<|im_end|>", "75", prompt="45+30=", index=0),
        RewardInput("qa", "It is 74", "75", prompt="45+30=", index=1),
        RewardInput("qa", "75", "75", prompt="40+35=", index=2),
    ]


class FakeEngine:
    """Answers the judge prompts from a script, and keeps the prompts it was given."""

    def __init__(self, answers):
        self.answers, self.prompts = list(answers), []

    def __call__(self, texts):
        self.prompts.extend(texts)
        return self.answers[: len(texts)]


def test_a_fake_engine_s_answers_become_scores_and_an_unparsable_one_is_counted():
    template, parser = template_of("Q={question} R={response} REF={reference}", None)
    engine = FakeEngine(["YES", "NO", "the answer looks plausible"])
    judge = LLMJudge(engine, template=template, parser=parser, on_error="fixed", failure_reward=-0.5)
    out = judge.score(_samples())
    # the response reaches the judge without its thinking and end-of-turn marker
    assert engine.prompts == ["Q=45+30= R=The sum is 75 REF=75", "Q=45+30= R=It is 74 REF=75", "Q=40+35= R=75 REF=75"]
    assert out.scores == [1.0, 0.0, -0.5] and out.num_failures == 1
    assert out.extra["judge_parsed"] == [1.0, 1.0, 0.0]
    strict = LLMJudge(FakeEngine(["YES", "maybe"]), template=template, parser=parser, label="reward.workers.j")
    with pytest.raises(RewardFunctionError, match=r"reward.workers.j \(an LLM judge, parser yes_no\) wrote no score in 'maybe' on sample 1"):
        strict.score(_samples()[:2])


def test_the_built_in_templates_and_roll_s_template_name():
    template, parser = template_of("Qwen2.5-7B-Instruct-RLVR-prompt", None)
    assert parser == "yes_no" and "{reference}" in template
    assert template_of("score_0_10", None)[1] == "score_0_10"
    assert template_of("reference_match", "score_0_10")[1] == "score_0_10"
    with pytest.raises(ConfigError, match="neither a built-in template"):
        template_of("judge it", None)


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("judge") / "model", layers=1, hidden=32, heads=4, seed=3)


def hf_judge(model_dir, batch_size=None, **kwargs):
    """The hf engine judge of `model_dir`, built through the engine registry."""
    return EngineJudge(judge_config(str(model_dir), JudgeEngineConfig(), batch_size=batch_size), **kwargs)


def test_a_tiny_model_judges_through_the_hf_engine(judge_model):
    engine = hf_judge(judge_model, generating_args={"max_new_tokens": 5})
    samples = _samples()
    template, parser = template_of("score_0_10", None)
    texts = [t.format(question=s.prompt, response=s.solution_str, reference=s.ground_truth) for t, s in zip([template] * 3, samples)]
    answers = engine(texts)
    assert len(answers) == 3 and answers == engine(texts)  # greedy: the same answers again
    assert all(len(engine.tokenizer(a, add_special_tokens=False)["input_ids"]) <= 6 for a in answers)
    one_at_a_time = hf_judge(judge_model, batch_size=1, generating_args={"max_new_tokens": 5})
    assert one_at_a_time.engine.max_num_seqs == 1 and one_at_a_time(texts) == answers  # infer_batch_size: memory, not answers
    prompt_ids = engine.chat("hello")
    assert engine.tokenizer.decode(prompt_ids).count("hello") == 1 and len(prompt_ids) > 3  # inside the chat template
    judge = LLMJudge(engine, template=template, parser=parser, on_error="fixed", failure_reward=0.25)
    out = judge.score(samples)
    parsed = [parse_verdict(a, parser) for a in engine([judge_text_of(template, s) for s in samples])]
    assert out.scores == [0.25 if p is None else p for p in parsed]
    assert out.num_failures == sum(p is None for p in parsed)


def judge_text_of(template, sample):
    from posttrain.rewards.judge import judge_text

    return judge_text(template, sample)


def _prompt_ids(judge_model, name):
    """The token ids of the judge prompt "Is 2+2=4?" of a judge built from its spec with chat_template_name `name`."""
    spec = judge_spec("reward.workers.j", judge_prompt=None, model_args={"model_name_or_path": str(judge_model)}, generating_args={},
                      infer_batch_size=None, reward_kwargs={}, chat_template_name=name)
    engine = spec.build(on_error="raise", failure_reward=0.0).generate
    return engine, engine.chat("Is 2+2=4?")


def test_chat_template_name_changes_the_judge_prompt_s_token_ids(judge_model):
    engine, own = _prompt_ids(judge_model, None)  # null: the judge tokenizer's own chat template (ChatML here)
    chatml = "<|im_start|>user\nIs 2+2=4?<|im_end|>\n<|im_start|>assistant\n"
    assert own == engine.tokenizer(chatml, add_special_tokens=False)["input_ids"]
    assert _prompt_ids(judge_model, "native")[1] == own  # ROLL's native: the tokenizer's template as it is
    # longcot_V3 opens the judge's thinking after the assistant header, as ROLL's template of that name
    assert _prompt_ids(judge_model, "longcot_V3")[1] == engine.tokenizer(chatml + "<think>\n", add_special_tokens=False)["input_ids"]
    base = engine.tokenizer.decode(_prompt_ids(judge_model, "base")[1])  # ROLL's plain-text instruction for base models
    assert base.startswith("A conversation between User and Assistant.") and base.endswith("User: Is 2+2=4? Assistant:")
    long_cot = engine.tokenizer.decode(_prompt_ids(judge_model, "longCOT_qwen2.5")[1])  # its system prompt and instruction
    assert long_cot.startswith("<|im_start|>system\nYour role as an assistant") and "Return your final response within \\boxed{}. Is 2+2=4?" in long_cot


def test_a_named_template_that_needs_the_tokenizer_s_own_is_refused_without_one(judge_model, tmp_path):
    bare = tmp_path / "bare"  # the judge model with its chat template removed from both places it is kept
    shutil.copytree(judge_model, bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"reward.workers.j.chat_template_name: native renders the judge tokenizer's own chat template"):
        _prompt_ids(bare, "native")
    engine, plain = _prompt_ids(bare, "chatml")  # a template that writes its own text needs none
    assert engine.tokenizer.decode(plain) == "<|im_start|>user\nIs 2+2=4?<|im_end|>\n<|im_start|>assistant\n"


def test_judge_spec_checks_keys_without_loading(judge_model, tmp_path):
    spec = judge_spec("reward.workers.j", judge_prompt=None, model_args={"model_name_or_path": str(judge_model), "attn_implementation": "fa2"},
                      generating_args={"max_new_tokens": 4, "num_beams": 1}, infer_batch_size=2, reward_kwargs={"parse": "yes_no"})
    assert spec.parser == "yes_no" and spec.batch_size == 2
    bad = [
        (dict(model_args={}), "reward.workers.j.model_args.model_name_or_path: name the judge model"),
        (dict(generating_args={"num_beams": 4}), "reward.workers.j.generating_args.num_beams: the judge does not use it"),
        (dict(reward_kwargs={"scale": 2}), "an LLM judge takes only parse"),
        (dict(model_args={"model_name_or_path": str(judge_model), "quantization": "int4"}), "the judge does not use quantization"),
    ]
    base = dict(judge_prompt=None, model_args={"model_name_or_path": str(judge_model)}, generating_args={}, infer_batch_size=None, reward_kwargs={})
    for change, message in bad:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            judge_spec("reward.workers.j", **{**base, **change})
    with pytest.raises(ModelError):
        judge_spec("reward.workers.j", **{**base, "model_args": {"model_name_or_path": str(tmp_path / "absent")}})


@pytest.mark.parametrize("overrides, message", [
    (["reward.workers.w.judge_prompt=x {response}"], "reward.workers.w.judge_prompt: only an LLM judge (worker_cls: llm_judge) reads it"),
    (["reward.workers.w.worker_cls=llm_judge", "reward.workers.w.judge_model_type=api"], "api (a judge served over HTTP) is not implemented"),
    (["reward.workers.w.worker_cls=llm_judge", "reward.workers.w.world_size=2"], "an LLM judge runs its model in the training process"),
    (["reward.workers.w.chat_template_name=qwen3"], "reward.workers.w.chat_template_name: only an LLM judge (worker_cls: llm_judge) reads it"),
])
def test_judge_keys_are_checked_at_load(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, ["reward.workers.w.tag_included=[a]", *overrides])
    assert message in str(info.value)
