"""reward.launch_reward_fn_async: the reward function scores on a background thread while the caller
computes log-probs, and the scores (and a reward error) are those of scoring in place."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import torch

from posttrain.config import load_config
from posttrain.errors import ConfigError, RewardFunctionError
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.trainer.rewarding import RewardStage
from worker_helpers import answer_batch


def _stage(fn, *overrides) -> RewardStage:
    cfg = load_config(None, ["reward.overlong_buffer.enable=true", "reward.overlong_buffer.len=4", "data.max_response_length=6", *overrides])
    return RewardStage(cfg, build_tiny_tokenizer(), fn)


def test_the_function_scores_while_the_caller_works_and_the_scores_are_the_same():
    computed = threading.Event()  # set once the caller's "log-probs" are done

    def by_length(data_source, solution_str, ground_truth, extra_info=None):
        assert computed.wait(10), "the reward function ran before the caller's own work: not in the background"
        return {"score": len(solution_str) / 10, "acc": float(solution_str.startswith(ground_truth))}

    background = _stage(by_length, "reward.launch_reward_fn_async=true")
    batch = answer_batch(background.tokenizer, ["12", "3", "12345"])
    texts = background.decode(batch)
    job = background.start(batch, texts, background=True)  # returns at once: the function waits for `computed`
    computed.set()  # the caller's log-prob passes ran here
    scores, metrics, extra, _ = job.result()
    in_place = _stage(by_length)
    assert in_place.executor is None
    expected = in_place.score(batch, texts)
    torch.testing.assert_close(scores, expected[0])
    assert (metrics, extra) == (expected[1], expected[2])
    # by hand: len/10 of "12<|im_end|>", "3<|im_end|>", "12345<|im_end|>", plus the overlong ramp
    # (-1 per token past 6 - 4 = 2 response tokens: 3, 2 and 6 tokens)
    torch.testing.assert_close(scores, torch.tensor([1.2 - 0.25, 1.1, 1.5 - 1.0]))
    for stage in (background, in_place):
        stage.close()


def test_a_reward_error_in_the_background_ends_the_run_with_the_usual_message():
    def broken(data_source, solution_str, ground_truth, extra_info=None):
        raise ValueError("no score for you")

    messages = []
    for overrides in ((), ("reward.launch_reward_fn_async=true",)):
        stage = _stage(broken, *overrides)
        batch = answer_batch(stage.tokenizer, ["12"])
        with pytest.raises(RewardFunctionError) as err:
            stage.start(batch, stage.decode(batch), background=bool(overrides)).result()
        messages.append(str(err.value))
        stage.close()
    assert messages[0] == messages[1] and "no score for you" in messages[0]


def test_scores_that_choose_rows_before_the_log_probs_cannot_be_awaited_after_them():
    with pytest.raises(ConfigError, match="launch_reward_fn_async .* data_processor.experience_pipeline.operators"):
        load_config(None, ["reward.launch_reward_fn_async=true", "data_processor.experience_pipeline.operators=[{name: reward_filter}]"])
    with pytest.raises(ConfigError, match=r"launch_reward_fn_async .* algorithm.filter_groups \(dynamic sampling\)"):
        load_config(None, ["reward.launch_reward_fn_async=true", "algorithm.filter_groups.enable=true"])


def test_a_run_scoring_in_the_background_trains_and_logs_as_one_scoring_in_place(tmp_path, monkeypatch):
    from knob_harness import make_assets, observe

    started = []  # the `background` of every scoring the run began
    start = RewardStage.start
    monkeypatch.setattr(RewardStage, "start", lambda self, batch, texts, *, background, **kw: (started.append(background), start(self, batch, texts, background=background, **kw))[1])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny runs: one thread is fastest (as in the honoured-keys harness)
    try:
        assets = make_assets(tmp_path)
        in_place = observe(assets, (), "in_place")
        assert in_place.exit[0] == 0 and set(started) == {False}
        started.clear()
        background = observe(assets, ("reward.launch_reward_fn_async=true",), "background")
        # a reward function that raises: the run ends with the same refusal (exit 2, one message)
        flaky = (f"reward.custom_reward_function.path={assets.data / 'reward.py'}", "reward.custom_reward_function.name=flaky")
        failed = [observe(assets, (*flaky, *extra), f"flaky{i}").exit for i, extra in enumerate(((), ("reward.launch_reward_fn_async=true",)))]
    finally:
        torch.set_num_threads(threads)
    assert True in started  # the training steps scored in the background (validation scores in place)
    # the same rollouts, metrics (scores, losses), weights and files; one more pool: the reward thread
    assert background.differences(in_place) == ["pools"]
    assert Counter(background.pools) - Counter(in_place.pools) == Counter({("threads", 1): 1})
    assert failed[0] == failed[1] and failed[0][0] == 2 and "an odd number of distinct characters" in failed[0][1]


def test_an_llm_judge_scores_in_place():
    with pytest.raises(ConfigError, match="launch_reward_fn_async: reward.workers.judge is an LLM judge"):
        load_config(None, ["reward.launch_reward_fn_async=true", "reward.workers={judge: {worker_cls: llm_judge, tag_included: [t]}}"])
