"""Reward workers routed by tag: which worker scores which sample, how scores merge, per-worker
metrics and failures, the unclaimed-tag error, and the config that builds them."""

from __future__ import annotations

import math
import textwrap

import pytest

from posttrain.config import load_config
from posttrain.errors import ConfigError, DataError, RewardFunctionError
from posttrain.rewards import RewardInput, RewardOutput
from posttrain.rewards.routing import RewardRouter, length_reward
from posttrain.rewards.types import WorkerTally
from posttrain.trainer.rewarding import build_router, merge_outputs, reward_function, worker_manager

SCORERS = textwrap.dedent(
    '''
    def exact(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": float(solution_str == ground_truth), "acc": float(solution_str == ground_truth)}


    def length(data_source, solution_str, ground_truth, extra_info=None, per_char=1.0):
        if solution_str == "boom":
            raise ValueError("cannot score boom")
        return per_char * len(solution_str)


    class Prefix:
        """A scorer class: built once with the worker's reward_kwargs, called per sample."""

        def __init__(self, prefix):
            self.prefix = prefix

        def __call__(self, data_source, solution_str, ground_truth, extra_info=None):
            return float(solution_str.startswith(self.prefix))
    '''
)


@pytest.fixture
def scorers(tmp_path):
    path = tmp_path / "scorers.py"
    path.write_text(SCORERS)
    return path


def _router(scorers, *overrides):
    cfg = load_config(None, [
        f"reward.workers.exact.worker_cls={scorers}:exact", "reward.workers.exact.tag_included=[a, b]",
        f"reward.workers.length.worker_cls={scorers}:length", "reward.workers.length.tag_included=[b, c]",
        *overrides,
    ])
    return build_router(cfg, reward_function(cfg))


def _samples(*rows):
    return [RewardInput(tag, text, truth, index=i, response_length=n) for i, (tag, text, truth, n) in enumerate(rows)]


def test_each_sample_goes_to_the_workers_of_its_tag_and_their_scores_add(scorers):
    router = _router(scorers, "reward.workers.length.weight=0.5")
    out = router.score(_samples(("a", "xy", "xy", 1), ("b", "xyz", "xyz", 1), ("c", "xyzw", "q", 1), ("a", "no", "xy", 1)))
    # a -> exact only; b -> exact + 0.5 x length; c -> 0.5 x length only
    assert out.scores == [1.0, 1.0 + 0.5 * 3, 0.5 * 4, 0.0]
    assert out.extra["acc"][:2] == [1.0, 1.0] and math.isnan(out.extra["acc"][2])  # c never met exact
    assert (out.workers["exact"].count, out.workers["exact"].score_sum) == (3, 2.0)
    assert (out.workers["length"].count, out.workers["length"].score_sum) == (2, 7.0)
    metrics = out.metrics()
    assert metrics["reward/exact/mean"] == pytest.approx(2 / 3) and metrics["reward/length/mean"] == 3.5
    assert metrics["reward/exact/count"] == 3 and metrics["reward/length/failures"] == 0
    assert metrics["reward/exact/time_s"] >= 0 and "reward/exact/length_penalty" not in metrics
    router.close()


def test_a_worker_without_samples_reports_count_zero(scorers):
    router = _router(scorers)
    out = router.score(_samples(("a", "xy", "xy", 1)))
    assert out.workers["length"] == WorkerTally() and math.isnan(out.metrics()["reward/length/mean"])
    router.close()


def test_a_tag_no_worker_claims_stops_the_batch_naming_it(scorers):
    router = _router(scorers)
    with pytest.raises(DataError, match=r"sample 1: tag 'zzz' .* claimed by no reward worker .*exact: \['a', 'b'\]"):
        router.score(_samples(("a", "x", "x", 1), ("zzz", "x", "x", 1)))
    with pytest.raises(DataError, match=r"f.parquet: row 4: tag 'd'"):
        router.check_tags({"a": "elsewhere", "d": "f.parquet: row 4"})
    router.close()


def test_the_response_length_penalty_follows_roll(scorers):
    assert [length_reward(n) for n in (0, 99, 100, 175, 400, 401)] == [-0.5, -0.5, -0.5, -0.375, 0.0, 0.0]
    router = _router(scorers, "reward.workers.exact.response_length_penalty_coef=2.0")
    out = router.score(_samples(("a", "xy", "xy", 50), ("a", "xy", "xy", 250), ("a", "xy", "xy", 500), ("c", "ab", "", 50)))
    # exact scores 1 each, plus 2 x length_reward; the length worker (tag c) has no penalty
    assert out.scores == [1.0 - 1.0, 1.0 - 0.5, 1.0, 2.0]
    assert out.workers["exact"].penalty_sum == -1.5
    assert out.metrics()["reward/exact/length_penalty"] == -0.5
    router.close()


def test_failures_follow_on_error_per_worker_and_are_counted_per_worker(scorers):
    router = _router(scorers, "reward.on_error=fixed", "reward.failure_reward=-1.0")
    out = router.score(_samples(("c", "boom", "", 1), ("b", "ok", "ok", 1), ("c", "abc", "", 1)))
    assert out.scores == [-1.0, 1.0 + 2.0, 3.0]
    assert (out.workers["length"].failures, out.workers["exact"].failures, out.num_failures) == (1, 0, 1)
    assert out.metrics()["reward/length/failures"] == 1.0
    router.close()
    raising = _router(scorers)  # on_error: raise (the default) names the worker and the sample
    with pytest.raises(RewardFunctionError, match=r"length in .*scorers.py \(reward worker 'length'\) raised ValueError: cannot score boom .* on sample 0"):
        raising.score(_samples(("c", "boom", "", 1)))
    raising.close()


def test_worker_cls_forms_and_kwargs(scorers, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, [
        "reward.workers.tasks.worker_cls=tasks", "reward.workers.tasks.tag_included=[posttrain/sort]",
        "reward.workers.mod.worker_cls=scorers:length", "reward.workers.mod.tag_included=[m]",
        "reward.workers.mod.reward_kwargs={per_char: 0.5}",
        "reward.workers.cls.worker_cls=scorers:Prefix", "reward.workers.cls.tag_included=[p]",
        "reward.workers.cls.reward_kwargs={prefix: ab}",
    ])
    fns = reward_function(cfg)
    assert [fns[n].label for n in ("tasks", "mod", "cls")] == ["posttrain.tasks:compute_score", "scorers:length", "scorers:Prefix"]
    router = build_router(cfg, fns)
    out = router.score(_samples(("posttrain/sort", "123", "123", 1), ("m", "abcd", "", 1), ("p", "abc", "", 1), ("p", "ba", "", 1)))
    assert out.scores == [1.0, 2.0, 1.0, 0.0]
    router.close()


@pytest.mark.parametrize("worker_cls, message", [
    ("nope", "unknown scorer 'nope'; use a built-in"),
    ("pkg.mod.Cls", "a class path? write it as package.module:ClassName"),
    ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
    ("{scorers}:missing", "has no function named 'missing'"),
])
def test_a_bad_worker_cls_is_refused_naming_the_worker(scorers, worker_cls, message):
    cfg = load_config(None, [f"reward.workers.w.worker_cls={worker_cls.format(scorers=scorers)}", "reward.workers.w.tag_included=[a]"])
    with pytest.raises(ConfigError, match="reward.workers.w.worker_cls: ") as info:
        reward_function(cfg)
    assert message in str(info.value)


def test_kwargs_the_scorer_does_not_take_are_refused(scorers):
    cfg = load_config(None, [f"reward.workers.w.worker_cls={scorers}:exact", "reward.workers.w.tag_included=[a]",
                             "reward.workers.w.reward_type=soft"])
    with pytest.raises(ConfigError, match=r"reward.workers.w.worker_cls: exact in .* reward_kwargs \['reward_type'\]"):
        reward_function(cfg)


@pytest.mark.parametrize("overrides, message", [
    (["reward.workers.w.worker_cls=tasks"], "reward.workers.w.tag_included: name at least one tag"),
    (["reward.workers.w.tag_included=[a]", "reward.custom_reward_function.path=x.py"], "both choose how samples are scored"),
    (["reward.workers.w.tag_included=[a]",
      "reward.workers.w.worker_cls=roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker"], "write worker_cls: math"),
    (["reward.workers.w.tag_included=[a]", "reward.workers.w.judge_prompt=judge this"], "only an LLM judge (worker_cls: llm_judge) reads it"),
    (["reward.workers.w.tag_included=[a]", "reward.workers.w.query_filter_config={type: mean_filter, filter_args: {std_threshold: 0}}"],
     "mean_filter does not read std_threshold; it takes: threshold_up, threshold_down"),
    (["reward.workers.w.tag_included=[a]", "reward.workers.w.world_size=0"], "reward.workers.w.world_size: must be >= 1"),
    (["reward.workers.w.tag_included=[a]", "reward.workers.w.tag_include=[b]"], "reward.workers.w.tag_include: unknown key"),
])
def test_worker_config_mistakes_are_refused_at_load(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert message in str(info.value)


def test_world_size_gives_the_worker_a_pool_of_its_own(scorers):
    cfg = load_config(None, [f"reward.workers.w.worker_cls={scorers}:exact", "reward.workers.w.tag_included=[a]",
                             f"reward.workers.v.worker_cls={scorers}:exact", "reward.workers.v.tag_included=[b]",
                             "reward.workers.v.world_size=2"])
    assert worker_manager(cfg, "w") == ("naive", {"on_error": "raise", "failure_reward": 0.0, "timeout_s": 60.0})
    assert worker_manager(cfg, "v")[0] == "parallel" and worker_manager(cfg, "v")[1]["num_workers"] == 2
    router = build_router(cfg, reward_function(cfg))
    pool = router.workers[1].manager
    try:
        out = router.score(_samples(("a", "x", "x", 1), ("b", "y", "y", 1), ("b", "y", "n", 1)))
        assert out.scores == [1.0, 1.0, 0.0] and len(pool._workers) == 2 and not router.workers[1].in_process
    finally:
        router.close()


def test_shares_of_one_batch_merge_their_worker_tallies():
    first = RewardOutput([1.0], workers={"m": WorkerTally(1, 1.0, 0, 0.0, 0.2)})
    second = RewardOutput([0.0, 1.0], num_failures=1, workers={"m": WorkerTally(2, 1.0, 1, 0.0, 0.5), "c": WorkerTally(0)})
    merged = merge_outputs([first, second])
    assert merged.workers == {"m": WorkerTally(3, 2.0, 1, 0.0, 0.5), "c": WorkerTally(0)}
    assert merged.metrics()["reward/m/mean"] == pytest.approx(2 / 3) and merged.num_failures == 1


def test_a_router_needs_workers():
    with pytest.raises(ValueError):
        RewardRouter([])
