"""The experience pipeline's operators on hand-made batches (posttrain.buffer.operators)."""

from __future__ import annotations

import math

import torch

from posttrain.buffer.operators import check_pipeline, run_pipeline
from posttrain.records import RolloutBatch


def _batch(groups, lengths, infos=None):
    n, width = len(groups), max(lengths)
    mask = torch.tensor([[1.0] * k + [0.0] * (width - k) for k in lengths])
    return RolloutBatch(
        prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1),
        response_ids=torch.zeros(n, width, dtype=torch.long), response_mask=mask, rollout_logprobs=torch.zeros(n, width),
        weights_version=torch.zeros(n, dtype=torch.long), group_index=groups, data_source=[""] * n,
        ground_truth=[None] * n, extra_info=infos or [{} for _ in range(n)], raw_prompt=[""] * n,
    )


def test_filters_keep_the_rows_their_rule_names():
    batch = _batch(["a", "a", "b", "b", "c"], [3, 1, 2, 2, 4])
    scores = torch.tensor([1.0, 0.0, 0.5, 0.5, float("nan")])
    texts = ["x", "y", "z", "z", "w"]
    run = lambda ops: run_pipeline(ops, batch, scores, texts)  # noqa: E731
    kept, s, t, m = run([{"name": "reward_filter", "args": {"threshold": 0.5}}])
    assert t == ["x", "z", "z"] and m["experience_pipeline/0_reward_filter/filtered"] == 2.0  # NaN >= 0.5 is false
    kept, s, t, _ = run([{"name": "reward_std_filter"}])
    assert kept.group_index == ["a", "a"]  # b has std 0, c has one response
    kept, s, t, _ = run([{"name": "invalid_reward_filter"}, {"name": "dedup_filter"}])
    assert t == ["x", "y", "z"]  # NaN row dropped, the second identical "z" of group b dropped
    kept, s, t, _ = run([{"name": "response_length_filter", "args": {"min_length": 2, "max_length": 3}}])
    assert t == ["x", "z", "z"]


def test_reward_shaping_reads_the_rows_extra_info():
    infos = [{"quality": 2.0}, {"quality": 0.0}, {}]
    batch = _batch(["a", "a", "b"], [1, 1, 1], infos)
    rules = [{"stats_key": "quality", "op_type": "ADD", "weight": 0.5}, {"stats_key": "quality", "op_type": "DIV", "weight": 1.0}]
    _, scores, _, metrics = run_pipeline([{"name": "reward_shaping_mapper", "args": {"reward_shaping_configs": rules}}],
                                         batch, torch.tensor([1.0, 1.0, 1.0]), ["", "", ""])
    # row 0: (1 + 0.5 x 2) / 2 = 1; row 1: 1 + 0 = 1, then DIV by 0 keeps it; row 2 has no stats
    assert scores.tolist() == [1.0, 1.0, 1.0]
    _, scores, _, metrics = run_pipeline([{"name": "reward_shaping_mapper", "args": {"reward_shaping_configs": rules[:1]}}],
                                         batch, torch.tensor([1.0, 1.0, 1.0]), ["", "", ""])
    assert scores.tolist() == [2.0, 1.0, 1.0] and math.isclose(metrics["experience_pipeline/0_reward_shaping_mapper/reward_diff/mean"], 1 / 3, rel_tol=1e-6)


def test_unknown_refused_and_misspelt_operators_are_named():
    problems = check_pipeline([{"name": "data_juicer", "args": {}}, {"name": "reward_filtr"}, {"name": "reward_filter", "args": {"treshold": 1}}], "ops")
    assert problems[0].startswith("ops[0]: data_juicer is refused: data-juicer operators need the data_juicer package")
    assert "unknown operator 'reward_filtr'" in problems[1]
    assert problems[2] == "ops[2]: reward_filter takes no treshold (its arguments: threshold)"
    assert check_pipeline([{"name": "dedup_filter"}, {"name": "pass_rate_calculator"}], "ops") == []


def test_pass_rate_calculator_reports_how_the_prompts_pass_rates_spread():
    batch = _batch(["a", "a", "b", "b", "c", "c", "d"], [1] * 7)
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.05])  # pass rates a 0.5, b 1, c 0, d 0.05
    kept, s, _, metrics = run_pipeline([{"name": "pass_rate_calculator"}], batch, scores, [""] * 7)
    assert len(kept) == 7 and torch.equal(s, scores)  # it keeps and reshapes nothing
    got = {k.rpartition("/")[2]: v for k, v in metrics.items()}
    # d's 0.05 is below 1/16 + 1e-3: in (0, 1) but not strictly valid
    assert got == {"valid_ratio": 0.5, "strict_valid_ratio": 0.25, "<1_ratio": 0.75, ">0_ratio": 0.75, "<15_16_ratio": 0.75, ">1_16_ratio": 0.5}
