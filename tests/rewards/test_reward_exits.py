"""A reward function that tries to end the process (`sys.exit`, `exit()`, a bare BaseException) is a
user error naming its file and function, under every manager: never a silent exit status 0."""

from __future__ import annotations

import textwrap

import pytest
from cli_run_helpers import assert_user_error, tiny_run, write_config
from fork_run_helpers import posttrain_forked

from posttrain.errors import RewardFunctionError
from posttrain.rewards import NaiveRewardManager, ParallelRewardManager, RewardInput, load_reward_function

SOURCE = textwrap.dedent(
    """
    import sys


    class Stop(BaseException):
        pass


    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        sys.exit(0)


    def stop(data_source, solution_str, ground_truth, extra_info=None):
        raise Stop("enough")
    """
)


@pytest.fixture
def exiting_file(tmp_path):
    path = tmp_path / "exiting_reward.py"
    path.write_text(SOURCE)
    return str(path)


def sample():
    return [RewardInput("unit/test", "a", "a", None, index=0)]


@pytest.mark.parametrize("on_error", ["raise", "fixed"])
def test_naive_manager_refuses_sys_exit_under_either_policy(exiting_file, on_error):
    manager = NaiveRewardManager(load_reward_function(exiting_file), on_error=on_error)
    with pytest.raises(RewardFunctionError) as err:
        manager.score(sample())
    message = str(err.value)
    assert f"reward function compute_score in {exiting_file} called sys.exit(0)" in message
    assert f"(at {exiting_file}:10)" in message and "on sample 0 (data_source='unit/test')" in message, message
    assert "return a score" in message


def test_the_user_s_line_is_named_when_a_library_wraps_sys_exit(exiting_file, monkeypatch):
    # wandb, once started in a process, replaces sys.exit with its own function: the innermost frame
    # is then in site-packages, and the message must still point at the reward file's line
    import sys
    import sysconfig

    library = {}
    exec(compile("def wrapped_exit(code=None):\n    raise SystemExit(code)\n", f"{sysconfig.get_paths()['purelib']}/hooks.py", "exec"), library)
    monkeypatch.setattr(sys, "exit", library["wrapped_exit"])
    with pytest.raises(RewardFunctionError) as err:
        NaiveRewardManager(load_reward_function(exiting_file)).score(sample())
    assert f"called sys.exit(0) (at {exiting_file}:10)" in str(err.value), str(err.value)


def test_naive_manager_refuses_any_base_exception(exiting_file):
    manager = NaiveRewardManager(load_reward_function(exiting_file, "stop"), on_error="fixed")
    with pytest.raises(RewardFunctionError, match=r"stop in .* raised Stop: enough \(a BaseException"):
        manager.score(sample())


def test_parallel_manager_refuses_sys_exit_in_its_worker(exiting_file):
    with ParallelRewardManager(load_reward_function(exiting_file), num_workers=1, on_error="fixed") as manager:
        with pytest.raises(RewardFunctionError, match=r"compute_score in .*exiting_reward.py called sys.exit\(0\)"):
            manager.score(sample())


@pytest.mark.parametrize("manager", ["naive", "parallel"])
def test_train_with_an_exiting_reward_function_exits_2_naming_file_and_function(tmp_path, exiting_file, manager):
    out = posttrain_forked(
        "train", str(write_config(tmp_path)), *tiny_run(tmp_path), f"reward.custom_reward_function.path={exiting_file}",
        f"reward.reward_manager={manager}", "reward.num_workers=1", cwd=tmp_path,
    )
    assert_user_error(out, f"reward function compute_score in {exiting_file} called sys.exit(0)", "sample 0")
    assert not (tmp_path / "run" / "final_model").exists()


def test_a_reward_file_that_exits_on_import_is_an_error(tmp_path):
    path = tmp_path / "exits_on_import.py"
    path.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(RewardFunctionError, match=f"importing the reward function file {path} failed: SystemExit: 3"):
        load_reward_function(str(path))
