import logging
import math

import pytest

from posttrain.errors import ConfigError, RewardFunctionError
from posttrain.rewards import (
    NaiveRewardManager,
    RewardInput,
    build_reward_manager,
    load_reward_function,
    register_reward_manager,
)


def inputs(*texts, truth="a", extra_info=None):
    return [RewardInput("unit/test", text, truth, extra_info, index=i) for i, text in enumerate(texts)]


def test_naive_scores_floats_in_order(reward_file):
    manager = NaiveRewardManager(load_reward_function(reward_file))
    out = manager.score(inputs("a", "b", " a"))
    assert out.scores == [1.0, 0.0, 1.0]
    assert out.extra == {} and out.num_failures == 0


def test_dict_extras_become_per_sample_metrics_with_nan_for_missing_keys(reward_file):
    fn = load_reward_function(reward_file, "with_metrics")
    samples = [
        RewardInput("unit/test", "a", "a", {"with_length": True}, 0),
        RewardInput("unit/test", "bb", "a", None, 1),
    ]
    out = NaiveRewardManager(fn).score(samples)
    assert out.scores == [1.0, 0.0]
    assert set(out.extra) == {"acc", "length"}  # "pred" is a string: not a metric
    assert out.extra["acc"] == [1.0, 0.0]
    assert out.extra["length"][0] == 1.0 and math.isnan(out.extra["length"][1])
    assert out.metrics() == {"reward/acc": 0.5, "reward/length": 1.0, "reward/failures": 0.0}
    assert out.tensor().tolist() == [1.0, 0.0]


def test_raising_function_error_names_function_sample_data_source_and_line(reward_file):
    manager = NaiveRewardManager(load_reward_function(reward_file, "misbehave"))
    with pytest.raises(RewardFunctionError) as err:
        manager.score(inputs("ok", "raise", "raise"))
    message = str(err.value)
    assert f"reward function misbehave in {reward_file} raised ValueError: cannot parse answer" in message
    assert f"(at {reward_file}:" in message
    assert "on sample 1 (data_source='unit/test'); solution_str: 'raise'" in message
    assert "1 more samples in this batch failed too" in message
    assert "reward.on_error: fixed" in message


@pytest.mark.parametrize(
    "text, problem",
    [
        ("nan", "returned nan instead of a finite number"),
        ("none", "returned None (NoneType) instead of a number"),
        ("text", "returned '1.0' (str) instead of a number"),
        ("nodict", "returned a dict without a 'score' key (keys: acc)"),
    ],
)
def test_bad_returns_are_errors_not_zeros(reward_file, text, problem):
    manager = NaiveRewardManager(load_reward_function(reward_file, "misbehave"))
    with pytest.raises(RewardFunctionError) as err:
        manager.score(inputs(text))
    assert problem in str(err.value)
    assert "misbehave" in str(err.value) and "sample 0" in str(err.value)


def test_long_solution_is_previewed_by_its_first_200_characters():
    def strict(data_source, solution_str, ground_truth, extra_info):
        raise RuntimeError("boom")

    with pytest.raises(RewardFunctionError) as err:
        NaiveRewardManager(strict).score(inputs("x" * 199 + "yz"))
    message = str(err.value)
    assert repr("x" * 199 + "y") + "... (201 chars)" in message
    assert "test_reward_managers.test_long_solution_is_previewed_by_its_first_200_characters.<locals>.strict" in message


def test_fixed_failure_reward_counts_failures_and_warns_once_per_kind(reward_file, caplog):
    manager = NaiveRewardManager(load_reward_function(reward_file, "misbehave"), on_error="fixed", failure_reward=-1.0)
    with caplog.at_level(logging.WARNING, logger="posttrain.rewards"):
        out = manager.score(inputs("ok", "raise", "nan", "raise"))
    assert out.scores == [1.0, -1.0, -1.0, -1.0]
    assert out.num_failures == 3
    assert out.metrics()["reward/failures"] == 3.0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert any(w.startswith("2 of 4 samples failed (raised) and were scored -1.0") for w in warnings)
    assert any(w.startswith("1 of 4 samples failed (non_finite)") for w in warnings)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="posttrain.rewards"):
        again = manager.score(inputs("raise"))
    assert again.num_failures == 1 and caplog.records == []


def test_bad_failure_policy_is_a_config_error(reward_file):
    fn = load_reward_function(reward_file)
    with pytest.raises(ConfigError, match="reward.on_error: 'ignore' is not one of raise, fixed"):
        NaiveRewardManager(fn, on_error="ignore")
    with pytest.raises(ConfigError, match="reward.failure_reward: must be a finite number"):
        NaiveRewardManager(fn, on_error="fixed", failure_reward=float("nan"))


def test_registry_builds_by_name_and_lists_names_when_unknown(reward_file):
    fn = load_reward_function(reward_file)
    manager = build_reward_manager("naive", fn, on_error="fixed", failure_reward=0.5)
    assert isinstance(manager, NaiveRewardManager) and manager.policy.failure_reward == 0.5
    with pytest.raises(ConfigError, match="unknown reward manager 'batched'; choose one of: dapo, naive, parallel"):
        build_reward_manager("batched", fn)


def test_registry_refuses_options_a_manager_does_not_use(reward_file):
    with pytest.raises(ConfigError, match="the 'naive' manager does not use num_workers"):
        build_reward_manager("naive", load_reward_function(reward_file), num_workers=2)
    assert build_reward_manager("naive", load_reward_function(reward_file), timeout_s=5.0).timeout_s == 5.0


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="reward manager 'naive' is already registered"):
        register_reward_manager("naive")(NaiveRewardManager)


def test_numpy_and_tensor_scalars_are_accepted():
    import numpy as np
    import torch

    def numeric(data_source, solution_str, ground_truth, extra_info):
        return {"score": np.float32(0.5), "acc": torch.tensor(1.0), "n": np.int64(3)}

    out = NaiveRewardManager(numeric).score(inputs("a"))
    assert out.scores == [0.5] and out.extra == {"acc": [1.0], "n": [3.0]}
