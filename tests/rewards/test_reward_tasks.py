"""The built-in task scorers, reached through `load_reward_function(None)`."""

import pytest

from posttrain.errors import RewardFunctionError
from posttrain.rewards import NaiveRewardManager, ParallelRewardManager, RewardInput, load_reward_function

SAMPLES = [
    RewardInput("posttrain/arithmetic", "19<|im_end|>", "19", None, 0),
    RewardInput("posttrain/arithmetic", "18<|im_end|>", "19", None, 1),
]


def test_no_path_means_the_task_scorers_chosen_by_data_source():
    fn = load_reward_function(None)
    assert fn.label == "posttrain.tasks.compute_score"
    out = NaiveRewardManager(fn).score(SAMPLES)
    assert out.scores == [1.0, 0.0]
    assert out.extra == {"acc": [1.0, 0.0]}


def test_task_scorers_run_in_worker_processes_too():
    with ParallelRewardManager(load_reward_function(None), num_workers=1, timeout_s=30.0) as manager:
        assert manager.score(SAMPLES).scores == [1.0, 0.0]


def test_unknown_data_source_stops_the_batch_even_with_a_fixed_failure_reward():
    manager = NaiveRewardManager(load_reward_function(None), on_error="fixed", failure_reward=0.0)
    with pytest.raises(RewardFunctionError) as err:
        manager.score([RewardInput("openai/gsm8k", "42", "42", None, 7)])
    message = str(err.value)
    assert "raised DataError: no built-in scorer for data_source 'openai/gsm8k'" in message
    assert "on sample 7 (data_source='openai/gsm8k')" in message
    assert "reward.on_error" not in message  # the fix is a custom reward function, not a failure reward
