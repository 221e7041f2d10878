"""explorer.over_rollout in a single-turn RL stage: the groups the engine cut once enough groups had
finished (RolloutBatch.over_rolled) are left out of the step without a retry, counted in
rollout/over_rollout_groups; groups cut by explorer.max_timeout keep their retries (posttrain.trainer.deadlines)."""

from __future__ import annotations

import pytest
import torch
from rl_helpers import tiny_rl_files, tiny_rl_trainer

from posttrain.errors import ConfigError, UserError
from posttrain.rollout.progress import OverRollout
from posttrain.trainer.metrics import PhaseTimer
from tests.rollout.test_engine_deadline import StepClock
from tests.trainer.test_explorer_deadline import explore, first_prompts


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("over"))


def cut_by_engine(t, over: set[str], late: set[str] = frozenset()) -> list[tuple[list[str], OverRollout | None]]:
    """The engine's calls flag the rows of the groups in `over` as over-rollout's cut and those in
    `late` as the fixed deadline's; returns each call's prompt uids and the over-rollout it was given."""
    calls, generate = [], t.roles.rollout.generate

    def flagged(prompts, params, **k):
        calls.append((list(prompts.uid), params.over_rollout))
        out = generate(prompts, params, **k)
        if params.over_rollout is not None or params.deadline is not None:
            assert out.timed_out is not None
            out.over_rolled = torch.tensor([g in over for g in out.group_index]) & (params.over_rollout is not None)
            out.timed_out = out.timed_out | out.over_rolled | torch.tensor([g in late for g in out.group_index])
        return out
    t.roles.rollout.generate = flagged
    return calls


def test_over_rolled_groups_are_left_out_and_the_step_trains_on_the_rest(files):
    t = tiny_rl_trainer(files, "explorer.over_rollout.ratio=0.5", "explorer.over_rollout.wait_after_min=7", run="plain")
    prompts = first_prompts(t)
    u = prompts.uid
    calls = cut_by_engine(t, {u[0], u[3]})
    exp = explore(t, prompts)
    assert calls == [(u, OverRollout(0.5, 7.0))]  # the config reaches the engine; one call, no retry
    assert sorted(set(exp.batch.group_index)) == sorted([u[1], u[2]]) and len(exp.batch) == 4
    assert exp.batch.timed_out is None and exp.batch.over_rolled is None
    assert exp.reward_metrics["rollout/over_rollout_groups"] == 2.0
    metrics, train = t.learn(exp, 1, PhaseTimer(t.observer.watch()))
    assert len(train) == 4 and "actor/pg_loss" in metrics
    t.rewards.close()


def test_with_max_timeout_only_the_late_groups_are_generated_again(files):
    t = tiny_rl_trainer(files, "explorer.over_rollout.ratio=0.25", "explorer.max_timeout=60", "explorer.max_retry_times=1", run="both")
    prompts = first_prompts(t)
    u = prompts.uid
    calls = cut_by_engine(t, over={u[0]}, late={u[1]})
    exp = explore(t, prompts)
    # the retry is the late group alone, under its own deadline and without over-rollout
    assert calls == [(u, OverRollout(0.25, 30.0)), ([f"{u[1]}r1"], None)]
    assert sorted(set(exp.batch.group_index)) == sorted([u[1], u[2], u[3]])
    assert exp.reward_metrics["rollout/over_rollout_groups"] == 1.0
    assert exp.reward_metrics["rollout/timed_out_groups"] == 0.0 and exp.reward_metrics["rollout/retried_groups"] == 1.0
    t.rewards.close()


def test_ratio_zero_changes_nothing(files):
    t = tiny_rl_trainer(files, "explorer.over_rollout.ratio=0", "explorer.over_rollout.wait_after_min=5", run="zero")
    prompts = first_prompts(t)
    calls = cut_by_engine(t, set(prompts.uid))
    exp = explore(t, prompts)
    assert calls == [(prompts.uid, None)] and len(exp.batch) == 8
    assert "rollout/over_rollout_groups" not in exp.reward_metrics
    t.rewards.close()


def test_over_rollout_is_refused_where_it_cannot_act(files):
    from posttrain.config.load import load_config
    from posttrain.trainer.rl_build import make_engine

    root, model = files
    with pytest.raises(ConfigError, match=r"over_rollout.ratio"):
        tiny_rl_trainer(files, "explorer.over_rollout.ratio=1", run="bad1")
    with pytest.raises(ConfigError, match=r"wait_after_min"):
        tiny_rl_trainer(files, "explorer.over_rollout.ratio=0.5", "explorer.over_rollout.wait_after_min=0", run="bad2")
    with pytest.raises(ConfigError, match=r"explorer.over_rollout.ratio \(0.5\): reward.launch_reward_fn_async scores the batch"):
        tiny_rl_trainer(files, "explorer.over_rollout.ratio=0.5", "reward.launch_reward_fn_async=true", run="bad3")
    base = [f"model.path={model}", f"data.train_files={root}/data/train.parquet"]
    with pytest.raises(ConfigError, match=r"explorer.over_rollout.ratio \(0.5\): tool calling generates a conversation"):
        load_config(None, [*base, "rollout.multi_turn.enable=true", "explorer.over_rollout.ratio=0.5"])
    with pytest.raises(ConfigError, match=r"explorer.over_rollout.ratio \(0.5\): trainer.mode bench generates no training batches"):
        load_config(None, [*base, f"data.val_files={root}/data/test.parquet", "trainer.mode=bench", "explorer.over_rollout.ratio=0.5"])
    cfg = load_config(None, [*base, "rollout.name=vllm", "explorer.over_rollout.ratio=0.5"])
    with pytest.raises(UserError, match=r"explorer.over_rollout.ratio \(0.5\): the vllm engine \(rollout.name=vllm\) cannot end"):
        make_engine(cfg, None, None)


def test_the_engine_cuts_the_groups_after_the_first_and_the_wait_decides_when(files):
    """No fakes but the engine's clock (one second per reading): max_num_seqs 2 decodes the four groups
    one after another, each to the length budget (6 tokens). ratio 0.75 needs ceil(4 x 0.25) = 1 group:
    the first ends at reading 0, so a wait of 1 s ends the second chunk at its first token and the others
    too, and the step trains on the first group alone; a wait of 100 s outlasts the 15 readings left."""
    trained = {}
    for wait in (1, 100):
        t = tiny_rl_trainer(files, "rollout.max_num_seqs=2", "rollout.engine_kwargs.hf.decode_workers=1",
                            "explorer.over_rollout.ratio=0.75", f"explorer.over_rollout.wait_after_min={wait}", run=f"wait{wait}")
        t.roles.rollout.engine.clock = StepClock()
        prompts = first_prompts(t)
        exp = explore(t, prompts)
        trained[wait] = (list(dict.fromkeys(exp.batch.group_index)), exp.reward_metrics["rollout/over_rollout_groups"])
        if wait == 1:
            assert exp.batch.response_mask.sum(1).tolist() == [6.0, 6.0]
            metrics, train = t.learn(exp, 1, PhaseTimer(t.observer.watch()))
            assert len(train) == 2 and "actor/pg_loss" in metrics
        t.rewards.close()
    assert trained == {1: (prompts.uid[:1], 3.0), 100: (prompts.uid, 0.0)}
