"""`reward.timeout_s` under the naive manager: a hanging call is interrupted in-process (SIGALRM on
the main thread, a watchdog thread elsewhere), named in the error, or scored failure_reward."""

from __future__ import annotations

import logging
import signal
import textwrap
import threading
import time

import pytest
from cli_run_helpers import assert_user_error, tiny_run, write_config
from fork_run_helpers import posttrain_forked

from posttrain.errors import RewardFunctionError
from posttrain.rewards import NaiveRewardManager, RewardInput, load_reward_function
from posttrain.rewards.deadline import CallTimedOut, Deadline

SOURCE = textwrap.dedent(
    """
    import time


    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "sleep":
            time.sleep(1000)
        if solution_str == "spin":
            while True:
                pass
        if solution_str == "stubborn":
            try:
                time.sleep(1000)
            except Exception:
                return 1.0
        return 1.0 if solution_str == ground_truth else 0.0


    def always_hangs(data_source, solution_str, ground_truth, extra_info=None):
        while True:
            pass
    """
)


@pytest.fixture
def hanging_file(tmp_path):
    path = tmp_path / "hanging_reward.py"
    path.write_text(SOURCE)
    return str(path)


def inputs(*texts):
    return [RewardInput("unit/test", text, "a", None, index=i) for i, text in enumerate(texts)]


def test_main_thread_hangs_are_interrupted_and_the_manager_stays_usable(hanging_file, caplog):
    before = signal.getsignal(signal.SIGALRM)  # SIG_DFL, or the shared handler of a manager left open
    with NaiveRewardManager(load_reward_function(hanging_file), timeout_s=0.3, on_error="fixed", failure_reward=-1.0) as m:
        with caplog.at_level(logging.WARNING):
            out = m.score(inputs("a", "sleep", "spin", "stubborn", "b"))
        assert out.scores == [1.0, -1.0, -1.0, -1.0, 0.0] and out.num_failures == 3
        assert f"did not return within 0.3 s and was interrupted (at {hanging_file}:7) on sample 1" in caplog.text
        time.sleep(0.5)  # no late alarm may fire between calls
        assert m.score(inputs("a", "a")).scores == [1.0, 1.0]
    assert signal.getsignal(signal.SIGALRM) is before  # closing gives SIGALRM back


def test_a_hang_under_on_error_raise_names_file_function_and_sample_and_stops_at_once(hanging_file):
    manager = NaiveRewardManager(load_reward_function(hanging_file), timeout_s=0.3)
    with pytest.raises(RewardFunctionError) as err:
        manager.score(inputs("a", "spin", "spin", "spin"))
    message = str(err.value)
    assert f"reward function compute_score in {hanging_file} did not return within 0.3 s and was interrupted" in message
    assert "on sample 1 (data_source='unit/test'); solution_str: 'spin'" in message
    assert "more samples" not in message  # samples 2 and 3 were never waited out
    assert "reward.timeout_s" in message and "reward.on_error: fixed" in message
    manager.close()


def test_off_the_main_thread_a_watchdog_interrupts_pure_python_hangs(hanging_file):
    results = {}
    before = signal.getsignal(signal.SIGALRM)

    def score_in_thread():
        with NaiveRewardManager(load_reward_function(hanging_file), timeout_s=0.3, on_error="fixed") as m:
            results["out"] = m.score(inputs("spin", "a", "spin"))
            time.sleep(0.5)  # a stale injection would surface here
            results["again"] = m.score(inputs("a"))

    thread = threading.Thread(target=score_in_thread)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert results["out"].scores == [0.0, 1.0, 0.0] and results["out"].num_failures == 2
    assert results["again"].scores == [1.0]
    assert signal.getsignal(signal.SIGALRM) is before  # the alarm was never touched


def test_another_libraries_alarm_is_left_alone(hanging_file):
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        deadline = Deadline()
        with pytest.raises(CallTimedOut):
            deadline.run(lambda: [None for _ in iter(int, 1)], 0.2)  # falls back to the watchdog
        assert deadline._watchdog is not None
        deadline.close()
        assert fired == [] and signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL  # still the library's
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_fast_call_returns_its_value_and_its_exceptions():
    deadline = Deadline()
    assert deadline.run(lambda: 3, 5.0) == 3
    with pytest.raises(ZeroDivisionError):
        deadline.run(lambda: 1 / 0, 5.0)
    deadline.close()


def test_train_with_a_hanging_reward_function_exits_2_naming_file_function_and_sample(tmp_path, hanging_file):
    out = posttrain_forked(
        "train", str(write_config(tmp_path)), *tiny_run(tmp_path), f"reward.custom_reward_function.path={hanging_file}",
        "reward.custom_reward_function.name=always_hangs", "reward.timeout_s=0.5", cwd=tmp_path, timeout=120,
    )
    assert_user_error(
        out, f"reward function always_hangs in {hanging_file} did not return within 0.5 s",
        "on sample 0 (data_source='posttrain/sort')", "reward.timeout_s",
    )


def test_train_with_on_error_fixed_scores_hangs_as_failure_reward_and_finishes(tmp_path, hanging_file):
    out = posttrain_forked(
        "train", str(write_config(tmp_path)), *tiny_run(tmp_path), f"reward.custom_reward_function.path={hanging_file}",
        "reward.custom_reward_function.name=always_hangs", "reward.timeout_s=0.2", "reward.on_error=fixed",
        "reward.failure_reward=-0.5", "trainer.logger=[jsonl]", cwd=tmp_path, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"reward/failures": 8.0' in metrics  # 4 prompts x 2 responses, every one interrupted
    assert "did not return within 0.2 s and was interrupted" in out.stderr  # the one warning
