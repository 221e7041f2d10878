"""The parallel manager: same scores as naive, and hangs/crashes are bounded and reported.

Each manager starts worker processes (about a second each on 2 cores), so these tests are few and
each checks several things on one pool.
"""

import pytest

from posttrain.errors import ConfigError, RewardFunctionError
from posttrain.rewards import (
    NaiveRewardManager,
    ParallelRewardManager,
    RewardInput,
    build_reward_manager,
    load_reward_function,
)


def inputs(*texts, truth="a"):
    return [RewardInput("unit/test", text, truth, {"with_length": i % 2 == 0}, index=i) for i, text in enumerate(texts)]


def test_parallel_matches_naive_on_a_function_from_a_file(reward_file):
    fn = load_reward_function(reward_file, "with_metrics")
    samples = inputs("a", "b", "a", "cc", "a", "d", "a")
    expected = NaiveRewardManager(fn).score(samples)
    with build_reward_manager("parallel", fn, num_workers=2, timeout_s=30.0) as manager:
        got = manager.score(samples)
        again = manager.score(samples[:3])
    assert got == expected
    assert again.scores == expected.scores[:3]


def test_hanging_call_times_out_and_the_pool_stays_usable(reward_file, caplog):
    fn = load_reward_function(reward_file, "misbehave")
    with ParallelRewardManager(fn, num_workers=2, timeout_s=1.0, on_error="fixed", failure_reward=-1.0) as manager:
        out = manager.score(inputs("ok", "hang", "ok", "ok"))
        assert out.scores == [1.0, -1.0, 1.0, 1.0]
        assert out.num_failures == 1
        assert "did not return within 1 s (its worker process was killed and replaced) on sample 1" in caplog.text
        after = manager.score(inputs("ok", "ok", "ok"))  # a replacement worker took the hung one's place
        assert after.scores == [1.0, 1.0, 1.0] and after.num_failures == 0
        assert len(manager._workers) == 2 and all(w.process.is_alive() for w in manager._workers)


def test_errors_in_workers_name_function_sample_and_problem(reward_file):
    fn = load_reward_function(reward_file, "misbehave")
    with ParallelRewardManager(fn, num_workers=2, timeout_s=1.0) as manager:
        with pytest.raises(RewardFunctionError) as err:
            manager.score(inputs("ok", "hang"))
        message = str(err.value)
        assert f"reward function misbehave in {reward_file} did not return within 1 s" in message
        assert "on sample 1 (data_source='unit/test'); solution_str: 'hang'" in message

        raised = r"raised ValueError: cannot parse answer \(at .*my_reward.py:\d+\) on sample 0"
        with pytest.raises(RewardFunctionError, match=raised):
            manager.score(inputs("raise", "ok"))
        with pytest.raises(RewardFunctionError, match="crashed its worker process \\(exit code 3\\) on sample 0"):
            manager.score(inputs("crash"))
        with pytest.raises(RewardFunctionError, match="returned nan instead of a finite number on sample 2"):
            manager.score(inputs("ok", "ok", "nan"))
        assert manager.score(inputs("ok")).scores == [1.0]  # usable after every kind of failure


def test_parallel_options_are_checked():
    with pytest.raises(ConfigError, match="reward.num_workers: must be an integer >= 1"):
        ParallelRewardManager(len, num_workers=0)
    with pytest.raises(ConfigError, match="reward.timeout_s: must be > 0"):
        ParallelRewardManager(len, timeout_s=0)
    with pytest.raises(TypeError, match="cannot be pickled"):
        ParallelRewardManager(lambda **kw: 1.0)
