"""reward.self_judge (posttrain.trainer.self_judge, Trinity-RFT's math_trainable_ruler_workflow): the
policy judges each scored group; the verdict rewards the responses of groups whose gold reward does
not count, and the judge replies of the others train against the gold rewards. Hand-made replies
for the numbers, the load-time refusals, dynamic sampling's riders, and a real step on the tiny sort task."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from posttrain.config.load import load_config
from posttrain.errors import ConfigError, UserError
from posttrain.records import PromptBatch, RolloutBatch, VisionInputs
from posttrain.rollout.base import SamplingParams
from posttrain.trainer.dynamic_sampling import Round, gather_groups
from posttrain.config.sections.algorithm import FilterGroupsConfig
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.self_judge import SelfJudge, gold_known, judge_reward
from rl_helpers import tiny_rl_files, tiny_rl_trainer


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("self_judge"))


def _rows(tokenizer, texts: list[str], groups: list[str]) -> RolloutBatch:
    """Rows whose responses are `texts` (each ending with the end-of-turn token), in groups `groups`."""
    ids = [tokenizer(t + tokenizer.eos_token, add_special_tokens=False)["input_ids"] for t in texts]
    B, T = len(ids), max(len(i) for i in ids)
    response = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T)
    for b, row in enumerate(ids):
        response[b, : len(row)], mask[b, : len(row)] = torch.tensor(row), 1.0
    return RolloutBatch(prompt_ids=torch.ones(B, 3, dtype=torch.long), prompt_mask=torch.ones(B, 3), response_ids=response,
                        response_mask=mask, rollout_logprobs=torch.zeros(B, T), weights_version=torch.zeros(B, dtype=torch.long),
                        group_index=list(groups), data_source=["math"] * B, ground_truth=["4"] * B, extra_info=[{} for _ in range(B)],
                        raw_prompt=[""] * B)


class FakeEngine:
    """Answers each judge request with the next reply queued for its group, and records the requests."""

    def __init__(self, tokenizer, replies: dict[str, list[str]]):
        self.tokenizer, self.replies, self.calls = tokenizer, {k: list(v) for k, v in replies.items()}, []

    def __call__(self, prompts: PromptBatch, params: SamplingParams) -> RolloutBatch:
        texts = [self.tokenizer.decode(ids[m > 0].tolist()) for ids, m in zip(prompts.input_ids, prompts.attention_mask)]
        self.calls.append((list(prompts.uid), params.n, texts, prompts.input_ids.shape[1]))
        groups = [uid for uid in prompts.uid for _ in range(params.n)]
        return _rows(self.tokenizer, [self.replies[uid].pop(0) for uid in groups], groups)


def _judge(files, *overrides: str) -> SelfJudge:
    root, model = files
    cfg = load_config(None, [f"model.path={model}", f"data.train_files={root}/data/train.parquet", "rollout.n=2",
                             "reward.self_judge.enable=true", "reward.self_judge.gold_range=[-0.1,1.1]", *overrides])
    return SelfJudge(cfg, AutoTokenizer.from_pretrained(model), 0, SamplingParams(n=2, max_new_tokens=8))


def _uids(seed: int, probability: float, gold: bool, count: int = 1) -> list[str]:
    """The first `count` uids s1-<k> whose draw at `seed` is `gold`."""
    out = [f"s1-{k}" for k in range(200) if gold_known(seed, f"s1-{k}", probability) == gold]
    return out[:count]


def test_the_draw_is_the_seeds_and_the_uids_and_holds_the_probability():
    draws = [gold_known(7, f"s3-{k}", 0.2) for k in range(4000)]
    assert draws == [gold_known(7, f"s3-{k}", 0.2) for k in range(4000)]  # the same on every rank and on resume
    assert 0.18 < sum(draws) / len(draws) < 0.22
    assert draws != [gold_known(8, f"s3-{k}", 0.2) for k in range(4000)]
    assert not any(gold_known(7, f"s3-{k}", 0.0) for k in range(100)) and all(gold_known(7, f"s3-{k}", 1.0) for k in range(100))


def test_judge_reward_is_one_less_the_mean_gap_to_the_mapped_gold():
    # gold 1.1 -> 1.0 and -0.1 -> 0.0 on think_answer's range; scores 0.75 and 0.5: gaps 0.25 and 0.5
    assert judge_reward([0.75, 0.5], [1.1, -0.1], -0.1, 1.1) == pytest.approx(1 - 0.375)
    assert judge_reward([0.5], [0.5], 0.0, 1.0) == 1.0
    assert judge_reward(None, [1.0, 0.0], 0.0, 1.0) == 0.0


def test_blind_groups_take_the_verdict_and_gold_groups_train_the_judge(files):
    judge = _judge(files, "reward.self_judge.instructions=Answers go in answer tags.")
    tok = judge.tokenizer
    blind, gold = _uids(judge.seed, 0.2, False)[0], _uids(judge.seed, 0.2, True)[0]
    batch = _rows(tok, ["<answer>4</answer>", "five", "<answer>4</answer>", "<answer>3</answer>"], [blind, blind, gold, gold])
    scores = torch.tensor([1.1, -0.1, 1.1, 0.0])  # the gold rewards
    engine = FakeEngine(tok, {blind: ["The first is right. [0.9, 0.2]"],
                              gold: ["[1, 0.5]", "I cannot tell."]})
    out = judge(batch, ["<answer>4</answer><|im_end|>", "five<|im_end|>", "<answer>4</answer><|im_end|>", "<answer>3</answer><|im_end|>"],
                scores, {0: "2+2?", 2: "1+3?"}, engine)
    # one request for the blind group (n 1), then rollout.n replies to the gold group's request
    assert [(uids, n) for uids, n, _, _ in engine.calls] == [([blind], 1), ([gold], 2)]
    request = engine.calls[1][2][0]
    assert "1+3?\n\nAnswers go in answer tags." in request and "Answer 1:\n<answer>4</answer>\n\nAnswer 2:\n<answer>3</answer>" in request and "<|im_end|>\n\nAnswer" not in request
    # the responses: the verdict where the gold does not count, the gold where it does; then the two judge rows
    gap = (abs(1 - (1.1 + 0.1) / 1.2) + abs(0.5 - (0.0 + 0.1) / 1.2)) / 2
    assert out.scores.tolist() == pytest.approx([0.9, 0.2, 1.1, 0.0, 1 - gap, 0.0])
    assert len(out.batch) == 6 and len(out.texts) == 6
    assert out.batch.group_index == [blind, blind, gold, gold, f"{gold}-judge", f"{gold}-judge"]
    assert out.texts[4] == "[1, 0.5]<|im_end|>"
    assert out.metrics == pytest.approx({"self_judge/gold_groups": 0.5, "self_judge/parsed": 2 / 3, "self_judge/judge_rows": 2.0,
                                         "self_judge/judge_reward": (1 - gap) / 2, "self_judge/gold_reward": 0.525})


def test_an_unread_verdict_scores_its_group_zero_and_a_long_request_keeps_its_last_tokens(files):
    judge = _judge(files, "reward.self_judge.gold_probability=0", "data.max_prompt_length=40")
    tok = judge.tokenizer
    batch = _rows(tok, ["a", "b", "c"], ["g", "g", "g"])
    engine = FakeEngine(tok, {"g": ["[0.5, 0.5]"]})  # two scores for three answers: not read
    out = judge(batch, ["a", "b", "c"], torch.tensor([1.0, 1.0, 1.0]), {0: "Q"}, engine)
    assert out.scores.tolist() == [0.0, 0.0, 0.0] and out.metrics["self_judge/parsed"] == 0.0 and len(out.batch) == 3
    assert engine.calls[0][3] == 40 and engine.calls[0][2][0].endswith("<|im_start|>assistant\n")


def test_vision_rows_are_refused(files):
    judge = _judge(files)
    batch = _rows(judge.tokenizer, ["a"], ["g"])
    batch.vision = [VisionInputs(pixel_values=torch.zeros(4, 8), image_grid_thw=torch.tensor([[1, 2, 2]]))]
    with pytest.raises(UserError, match="images or videos"):
        judge(batch, ["a"], torch.zeros(1), {}, FakeEngine(judge.tokenizer, {}))


@pytest.mark.parametrize("override, message", [
    ("rollout.multi_turn.enable=true", "tool calling"),
    ("reward.launch_reward_fn_async=true", "launch_reward_fn_async"),
    ("algorithm.adv_estimator=remax", "greedy baseline"),
    ("explorer.max_timeout=30", "explorer.max_timeout"),
    ("reward.self_judge.gold_range=[1,0]", "gold_range"),
])
def test_what_it_does_not_combine_with_is_refused_at_load(files, override, message):
    root, model = files
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"model.path={model}", f"data.train_files={root}/data/train.parquet", "reward.self_judge.enable=true", override])


def test_dynamic_sampling_keeps_riders_with_the_prompts_it_took():
    groups = ["a", "a", "b", "b", "c", "c", "a-judge", "a-judge", "b-judge", "b-judge", "c-judge", "c-judge"]
    values = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.2, 0.4, 0.3, 0.1, 0.0, 0.0]
    B = len(groups)
    batch = RolloutBatch(prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2), response_ids=torch.arange(B).unsqueeze(1),
                         response_mask=torch.ones(B, 1), rollout_logprobs=torch.zeros(B, 1), weights_version=torch.zeros(B, dtype=torch.long),
                         group_index=groups, data_source=["t"] * B, ground_truth=[None] * B, extra_info=[{} for _ in range(B)], raw_prompt=[""] * B)
    v = torch.tensor(values)
    rnd = Round(batch, v, [str(i) for i in range(B)], {}, v, {g: g.removesuffix("-judge") for g in groups[6:]})
    out, metrics = gather_groups(lambda r: rnd, FilterGroupsConfig(enable=True), 2)
    # prompts a and b are taken (c is cut off, its judge group too); the riders do not count towards the two
    assert out.batch.group_index == ["a", "a", "b", "b", "a-judge", "a-judge", "b-judge", "b-judge"]
    assert metrics["filter_groups/groups"] == 3.0 and metrics["filter_groups/trained_groups"] == 2.0


def test_a_real_step_trains_the_judge_rows_only_where_the_gold_counts(files):
    ran = {}
    for p in (0.0, 1.0):
        t = tiny_rl_trainer(files, "reward.self_judge.enable=true", f"reward.self_judge.gold_probability={p}",
                            "data.max_prompt_length=256", run=f"run{p}")
        t.roles.sync.push(t.roles.actor.version)
        experience = t.explore(t._next_prompts(1), PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version)
        metrics, train = t.learn(experience, 1, PhaseTimer(t.observer.watch()))
        ran[p] = (experience, metrics, train)
    blind, gold = ran[0.0][0], ran[1.0][0]
    assert len(blind.batch) == 8 and blind.reward_metrics["self_judge/judge_rows"] == 0.0
    # gold for every prompt: 4 prompts x 2 responses, then 2 judge replies per prompt, each trained
    assert len(gold.batch) == 16 and gold.batch.group_index[8:] == [f"{u}-judge" for u in gold.batch.group_index[:8]]
    assert len(ran[1.0][2]) == 16 and gold.reward_metrics["self_judge/judge_rows"] == 8.0
    # a random model's verdicts do not parse: the blind responses score 0, the judge rows 0
    assert blind.scores.tolist() == [0.0] * 8 and gold.scores[8:].tolist() == [0.0] * 8
    assert "actor/pg_loss" in ran[1.0][1]
