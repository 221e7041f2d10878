"""verl's DAPO reward manager (reward.reward_manager: dapo): naive scoring with every sample's acc."""

from __future__ import annotations

import math

from posttrain.rewards import RewardInput, build_reward_manager


def scorer(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "boom":
        raise ValueError("cannot parse")
    if solution_str.startswith("{"):  # a dict with its own acc, and one without
        return {"score": 0.5, "acc": 1.0} if solution_str == "{acc}" else {"score": 0.25}
    return float(solution_str == ground_truth)


def _samples(*responses):
    return [RewardInput("t", r, "4", index=i) for i, r in enumerate(responses)]


def test_acc_is_the_function_s_acc_else_its_score():
    responses = ("4", "5", "{acc}", "{}", "boom")
    dapo = build_reward_manager("dapo", scorer, on_error="fixed", failure_reward=-1.0)
    naive = build_reward_manager("naive", scorer, on_error="fixed", failure_reward=-1.0)
    try:
        out, plain = dapo.score(_samples(*responses)), naive.score(_samples(*responses))
    finally:
        dapo.close()
        naive.close()
    assert out.scores == plain.scores == [1.0, 0.0, 0.5, 0.25, -1.0]
    assert out.extra["acc"] == [1.0, 0.0, 1.0, 0.25, -1.0]  # numbers: their score; a dict's own acc; a failure: the failure reward
    assert [a if not math.isnan(a) else None for a in plain.extra["acc"]] == [None, None, 1.0, None, None]
    assert out.metrics()["reward/acc"] == 0.25 and out.num_failures == 1
