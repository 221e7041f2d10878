"""explorer.max_timeout / max_retry_times in a single-turn RL stage: a prompt group the deadline cut
(or scored past it) is generated again with new noise, then left out of the step, counted in
rollout/timed_out_groups and rollout/retried_groups (posttrain.trainer.deadlines)."""

from __future__ import annotations

import json

import pytest
import torch
from rl_helpers import tiny_rl_files, tiny_rl_trainer

from posttrain.cli import main
from posttrain.data import collate_prompts
from posttrain.errors import ConfigError, UserError
from posttrain.trainer.metrics import PhaseTimer


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("deadline"))


def first_prompts(t):
    return collate_prompts(t.reader(t.sampler.next_batch()), t.pad_id, uid_prefix="s1")


def explore(t, prompts):
    t.roles.sync.push(t.roles.actor.version)
    return t.explore(prompts, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version)


def slow_groups(t, slow: set[str], outputs: list | None = None) -> list[list[str]]:
    """The engine's calls cut every row of the groups (uids as sent, retries' suffixed) in `slow`;
    returns the uids of each call's prompts (and keeps each call's batch in `outputs`)."""
    calls, generate = [], t.roles.rollout.generate

    def timed(prompts, params, **k):
        assert params.deadline is not None  # the rollout hands the deadline to the engine
        calls.append(list(prompts.uid))
        out = generate(prompts, params, **k)
        out.timed_out = out.timed_out | torch.tensor([g in slow for g in out.group_index])
        if outputs is not None:
            outputs.append(out[:])
        return out
    t.roles.rollout.generate = timed
    return calls


def test_a_late_group_is_generated_again_then_left_out(files):
    log = files[0] / "tasks.jsonl"
    t = tiny_rl_trainer(files, "explorer.max_timeout=60", "explorer.max_retry_times=1", f"explorer.task_rewards_file={log}")
    prompts = first_prompts(t)
    u = prompts.uid  # s1-<row>
    outputs = []
    calls = slow_groups(t, {u[0], u[1], f"{u[1]}r1"}, outputs)  # group 0 late once, group 1 late twice
    exp = explore(t, prompts)
    assert calls == [u, [f"{u[0]}r1", f"{u[1]}r1"]]  # the late groups again, with new uids (new noise)
    assert sorted(set(exp.batch.group_index)) == sorted([u[0], u[2], u[3]])  # group 0 back under its own uid
    assert len(exp.batch) == 6 and exp.batch.timed_out is None
    assert exp.reward_metrics["rollout/timed_out_groups"] == 1.0 and exp.reward_metrics["rollout/retried_groups"] == 2.0
    # explorer.task_rewards_file: a task logs when an attempt finishes it (groups 2 and 3, then 0), never while late
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [row["truth"] for row in lines] == [prompts.ground_truth[i] for i in (2, 3, 0)]
    assert [len(row["rewards"]) for row in lines] == [2, 2, 2]
    metrics, train = t.learn(exp, 1, PhaseTimer(t.observer.watch()))
    assert len(train) == 6 and "actor/pg_loss" in metrics  # the step trains on the groups that finished
    # the retry drew other responses than the first attempt did (same uid would give the same noise)
    first, retried = (b[[i for i, g in enumerate(b.group_index) if g.startswith(u[0])]] for b in outputs)
    assert first.group_index == [u[0]] * 2 and retried.group_index == [f"{u[0]}r1"] * 2
    assert first.response_ids.tolist() != retried.response_ids.tolist()
    t.rewards.close()
    # no retries: both late groups are left out at once
    t = tiny_rl_trainer(files, "explorer.max_timeout=60", run="r0")
    calls = slow_groups(t, {u[0], u[1]})
    exp = explore(t, first_prompts(t))
    assert len(calls) == 1 and sorted(set(exp.batch.group_index)) == sorted([u[2], u[3]])
    assert exp.reward_metrics["rollout/timed_out_groups"] == 2.0 and exp.reward_metrics["rollout/retried_groups"] == 0.0
    t.rewards.close()


def test_a_step_whose_every_group_is_late_skips_its_update(files):
    t = tiny_rl_trainer(files, "explorer.max_timeout=60", "explorer.max_retry_times=2", run="all")
    prompts = first_prompts(t)
    slow_groups(t, {f"{uid}{suffix}" for uid in prompts.uid for suffix in ("", "r1", "r2")})
    exp = explore(t, prompts)
    assert len(exp.batch) == 0
    assert exp.reward_metrics["rollout/timed_out_groups"] == 4.0 and exp.reward_metrics["rollout/retried_groups"] == 8.0
    metrics, _ = t.learn(exp, 1, PhaseTimer(t.observer.watch()))
    assert metrics == {"rollout/skipped_update": 1.0}
    t.rewards.close()


def test_scoring_past_the_deadline_makes_every_scored_group_late(files):
    """The batch is scored together: when the scoring ends past the deadline every group it scored
    is late; the retry, scored in time, keeps them all."""
    t = tiny_rl_trainer(files, "explorer.max_timeout=10", "explorer.max_retry_times=1", run="score")
    now = [100.0]
    t.clock = lambda: now[0]
    score = t.rewards.score_parts
    scorings = []

    def slow_score(batch, texts):
        scorings.append(len(batch))
        now[0] += 11.0 if len(scorings) == 1 else 1.0  # the first scoring takes 11 s, past the 10 s deadline
        return score(batch, texts)
    t.rewards.score_parts = slow_score
    t.roles.rollout.engine.clock = lambda: now[0]
    exp = explore(t, first_prompts(t))
    assert scorings == [8, 8] and len(exp.batch) == 8
    assert exp.reward_metrics["rollout/timed_out_groups"] == 0.0 and exp.reward_metrics["rollout/retried_groups"] == 4.0
    t.rewards.close()


def test_a_tiny_timeout_changes_what_the_step_trains_on(files, tmp_path):
    """End to end through the CLI with the hf engine's own clock: 1 ms is past after the first decode
    step, so every group is cut (its rows run to 6 tokens), retried once, left out; the update is
    skipped, where the same run without a timeout trains on all 8 rows."""
    root, model = files
    common = [f"model.path={model}", f"data.train_files={root}/data/train.parquet", "data.max_prompt_length=32",
              "data.max_response_length=6", "data.train_batch_size=4", "rollout.n=2", "rollout.ignore_eos=true",
              "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=8", "trainer.total_training_steps=1",
              "trainer.logger=[jsonl]"]
    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    rows = {}
    for name, extra in (("free", []), ("timed", ["explorer.max_timeout=0.001", "explorer.max_retry_times=1"])):
        run = tmp_path / name
        assert main(["train", str(config), *common, f"trainer.default_local_dir={run}", *extra]) == 0
        rows[name] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    free, timed = rows["free"], rows["timed"]
    assert "actor/pg_loss" in free and "rollout/timed_out_groups" not in free
    assert timed["rollout/timed_out_groups"] == 4.0 and timed["rollout/retried_groups"] == 4.0
    assert timed["rollout/skipped_update"] == 1.0 and "actor/pg_loss" not in timed


def test_timeouts_are_checked_before_training(files, tmp_path):
    with pytest.raises(ConfigError, match=r"explorer.max_retry_times \(2\): generates again the prompt groups"):
        tiny_rl_trainer(files, "explorer.max_retry_times=2", run="bad1")
    with pytest.raises(ConfigError, match="explorer.max_timeout"):
        tiny_rl_trainer(files, "explorer.max_timeout=-1", run="bad2")
    with pytest.raises(ConfigError, match=r"reward.launch_reward_fn_async runs after the batch"):
        tiny_rl_trainer(files, "explorer.max_timeout=5", "reward.launch_reward_fn_async=true", run="bad3")
    from posttrain.config.load import load_config

    root, model = files
    with pytest.raises(ConfigError, match=r"explorer.max_timeout \(5 s\): bounds the training batches' prompt groups, and trainer.mode bench"):
        load_config(None, [f"model.path={model}", f"data.train_files={root}/data/train.parquet", f"data.val_files={root}/data/test.parquet",
                           "trainer.mode=bench", "explorer.max_timeout=5"])


def test_engines_without_a_deadline_are_refused_where_they_are_built(files):
    from posttrain.config.load import load_config
    from posttrain.trainer.rl_build import make_engine

    root, model = files
    cfg = load_config(None, [f"model.path={model}", f"data.train_files={root}/data/train.parquet", "rollout.name=vllm",
                             "explorer.max_timeout=30"])
    with pytest.raises(UserError, match=r"explorer.max_timeout \(30 s\): the vllm engine \(rollout.name=vllm\) cannot stop"):
        make_engine(cfg, None, None)
