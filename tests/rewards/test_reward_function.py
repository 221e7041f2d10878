import pickle

import pytest

from posttrain.errors import ConfigError, RewardFunctionError
from posttrain.rewards import RewardFunction, load_reward_function


def test_loads_function_from_file_and_calls_it_with_verl_keywords(reward_file):
    fn = load_reward_function(reward_file, "compute_score")
    assert fn(data_source="d", solution_str=" 42 ", ground_truth="42", extra_info=None) == 1.0
    assert fn(data_source="d", solution_str="41", ground_truth="42") == 0.0
    assert fn.label == f"compute_score in {reward_file}"


def test_reward_kwargs_are_passed_on_every_call(reward_file):
    fn = load_reward_function(reward_file, "scaled", reward_kwargs={"scale": 2.5})
    assert fn(data_source="d", solution_str="a", ground_truth="a") == 2.5


def test_relative_path_is_resolved_against_the_current_directory(reward_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fn = load_reward_function("my_reward.py")
    assert fn.path == reward_file


def test_missing_file_names_the_config_key_and_path(tmp_path):
    missing = str(tmp_path / "nope.py")
    with pytest.raises(ConfigError) as err:
        load_reward_function(missing)
    assert "reward.custom_reward_function.path" in str(err.value)
    assert missing in str(err.value)


def test_missing_function_lists_what_the_file_defines(reward_file):
    with pytest.raises(ConfigError) as err:
        load_reward_function(reward_file, "score_it")
    message = str(err.value)
    assert "reward.custom_reward_function.name" in message
    assert "'score_it'" in message and reward_file in message
    assert "compute_score" in message and "with_metrics" in message


def test_attribute_that_is_not_callable_is_refused(reward_file):
    with pytest.raises(ConfigError, match="'NOT_A_FUNCTION' .* is a int, not a function"):
        load_reward_function(reward_file, "NOT_A_FUNCTION")


def test_function_with_the_wrong_signature_is_refused_at_load_time(reward_file):
    with pytest.raises(ConfigError) as err:
        load_reward_function(reward_file, "two_args")
    message = str(err.value)
    assert "two_args(solution_str, ground_truth)" in message
    assert "data_source, solution_str, ground_truth, extra_info" in message


def test_unknown_reward_kwarg_is_refused_at_load_time(reward_file):
    with pytest.raises(ConfigError, match=r"reward_kwargs \['scal'\]"):
        load_reward_function(reward_file, "scaled", reward_kwargs={"scal": 2.0})


def test_file_that_fails_to_import_names_the_file_and_the_error(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import math\nx = 1 / 0\n")
    with pytest.raises(RewardFunctionError) as err:
        load_reward_function(str(path))
    assert str(path) in str(err.value) and "ZeroDivisionError" in str(err.value)


def test_pickling_keeps_path_and_name_not_the_function(reward_file):
    fn = load_reward_function(reward_file, "scaled", reward_kwargs={"scale": 3.0})
    copy = pickle.loads(pickle.dumps(fn))
    assert isinstance(copy, RewardFunction) and copy._fn is None
    assert (copy.path, copy.name, copy.kwargs) == (reward_file, "scaled", {"scale": 3.0})
    assert copy(data_source="d", solution_str="a", ground_truth="a") == 3.0
