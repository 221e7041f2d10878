"""Replay and priority in the experience buffer (Trinity-RFT's priority queue), and its capacity."""

from __future__ import annotations

import pytest
import torch

from posttrain.buffer.experience import Experience
from posttrain.buffer.replay import Replay, Stored, pick, priority
from posttrain.buffer.jsonl import JsonlBuffer
from posttrain.buffer.sqlite import BufferError, ExperienceBuffer
from posttrain.config.load import load_config
from posttrain.config.sections.buffer import priority_args
from posttrain.records import RolloutBatch


def _replay(**kw) -> Replay:
    fn = kw.pop("fn", "linear_decay")
    return Replay(True, fn, priority_args(fn, kw.pop("args", {})), **kw)


def test_fresh_batches_first_then_reuse_decays_their_priority():
    r = _replay(reuse_cooldown_s=0.0)
    items = [Stored(1, 0, 2, 0, None), Stored(2, 1, 2, 0, None), Stored(3, 1, 2, 1, 5.0)]
    assert [priority(i, r) for i in items] == [0.0, 1.0, -1.0]  # policy step - 2 x use count
    assert pick(items, r, now=10.0) == (2, [])  # the newest weights' unread batch
    assert pick(items[::2], r, now=10.0) == (1, [])
    tie = [Stored(4, 1, 2, 0, None), Stored(2, 1, 2, 0, None)]
    assert pick(tie, r, now=0.0) == (2, [])  # equal priority: the older batch


def test_cooldown_no_reuse_use_count_limit_and_capacity():
    used = Stored(1, 5, 2, 1, 100.0)
    assert pick([used], _replay(reuse_cooldown_s=10.0), now=105.0) == (None, [])  # cooling down
    assert pick([used], _replay(reuse_cooldown_s=10.0), now=110.0) == (1, [])
    assert pick([used], _replay(reuse_cooldown_s=None), now=1e9) == (None, [])  # null: never reused
    limited = _replay(fn="decay_limit_randomization", args={"use_count_limit": 1}, reuse_cooldown_s=0.0)
    assert pick([used], limited, now=1e9) == (None, [])  # retired after one read
    # capacity 4 prompt groups: the two best batches (2 groups each) stay, the third is dropped
    full = [Stored(1, 0, 2, 0, None), Stored(2, 2, 2, 0, None), Stored(3, 1, 2, 0, None)]
    assert pick(full, _replay(capacity_groups=4), now=0.0) == (2, [1])
    noisy = _replay(fn="decay_limit_randomization", args={"sigma": 1.0})
    assert priority(Stored(1, 3, 2, 0, None), noisy) == priority(Stored(1, 3, 2, 0, None), noisy) != 3.0  # seeded noise
    with pytest.raises(ValueError, match="priority_fn linear_decay has no argument sigma"):
        priority_args("linear_decay", {"sigma": 1.0})


def _experience(policy_step: int, groups: int = 2) -> Experience:
    n = 2 * groups
    batch = RolloutBatch(
        prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1),
        response_ids=torch.zeros(n, 1, dtype=torch.long), response_mask=torch.ones(n, 1),
        rollout_logprobs=torch.zeros(n, 1), weights_version=torch.zeros(n, dtype=torch.long),
        group_index=[f"g{i // 2}" for i in range(n)], data_source=[""] * n, ground_truth=[None] * n,
        extra_info=[{} for _ in range(n)], raw_prompt=[""] * n,
    )
    return Experience(batch, torch.zeros(n), [""] * n, policy_step=policy_step)


STORAGES = {"sql": lambda p: ExperienceBuffer(p / "b.sqlite", poll_s=0.01), "file": lambda p: JsonlBuffer(p / "b", poll_s=0.01)}


@pytest.mark.parametrize("storage", STORAGES)
def test_a_replaying_buffer_reads_by_priority_reuses_and_releases_on_resume(tmp_path, storage):
    buf = STORAGES[storage](tmp_path)
    for b, policy in ((1, 0), (2, 1), (3, 1)):
        buf.write(b, _experience(policy))
    replay = _replay(reuse_cooldown_s=0.0)
    picked = [buf.claim(step, 1.0, replay=replay).policy_step for step in (1, 2, 3, 4)]
    # priorities 0, 1, 1 -> batch 2, then 3 (tie: older first), then 1 (0 beats the reused -1s), then 2 again
    assert buf.claims() == [(1, 2), (2, 3), (3, 1), (4, 2)] and picked == [1, 1, 0, 1]
    assert buf.release_after(2) == 2 and buf.claims() == [(1, 2), (2, 3)]
    buf.claim(3, 1.0, replay=replay)
    assert buf.claims()[-1] == (3, 1)  # the resumed step reads what it read before
    once = STORAGES[storage](tmp_path / "once")
    once.write(1, _experience(0))
    once.claim(1, 1.0, replay=_replay())
    with pytest.raises(BufferError, match="a batch it may read \\(replay: none fresh, none out of its reuse cooldown\\)"):
        once.claim(2, 0.05, replay=_replay())  # cooldown null: nothing is read twice


@pytest.mark.parametrize("storage", STORAGES)
def test_capacity_makes_the_explorer_wait_for_the_trainer(tmp_path, storage):
    buf = STORAGES[storage](tmp_path)
    buf.write(1, _experience(0, groups=2))
    assert buf.unread_groups() == 2 and buf.wait_for_room(2, 4, 0.05) == 0.0  # 2 + 2 fit in 4: no wait
    buf.report("trainer", "training step 1")
    with pytest.raises(BufferError, match=r"holds 2 unread prompt groups .* exceed its capacity 3;.*trainer: training step 1"):
        buf.wait_for_room(2, 3, 0.05)
    buf.claim(1, 1.0)
    assert buf.unread_groups() == 0 and buf.wait_for_room(2, 3, 0.05) == 0.0


def test_capacity_below_one_batch_and_bad_priority_arguments_are_refused():
    from posttrain.errors import ConfigError

    with pytest.raises(ConfigError, match=r"capacity \(4 prompt groups\) cannot hold one batch of data.train_batch_size \(8\)"):
        load_config(None, ["data.train_batch_size=8", "buffer.trainer_input.experience_buffer.capacity=4"])
    with pytest.raises(ConfigError, match="priority_fn linear_decay has no argument sigma"):
        load_config(None, ["buffer.trainer_input.experience_buffer.replay_buffer.priority_fn_args={sigma: 1}"])


def test_a_train_run_replays_an_explored_buffer_past_its_batches(tmp_path):
    storage = "file"  # the JSON-lines buffer end to end; both storages share the reading rules (tested above)
    from posttrain.models.tiny import make_tiny_model
    from posttrain.tasks import write_task_data
    from posttrain.trainer.run import run

    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", tmp_path / "data", train=8, test=0, sft=0, dpo=0)
    path = tmp_path / ("buffer.sqlite" if storage == "sql" else "buffer")
    base = [f"buffer.trainer_input.experience_buffer.storage_type={storage}", f"model.path={model}", f"data.train_files={tmp_path}/data/train.parquet", "data.train_batch_size=2", "rollout.n=2",
            "data.max_prompt_length=32", "data.max_response_length=4", "actor.ppo_mini_batch_size=2", "trainer.logger=[]",
            f"buffer.trainer_input.experience_buffer.path={path}"]
    run(load_config(None, [*base, "trainer.mode=explore", "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}/explore"]))
    run(load_config(None, [*base, "trainer.mode=train", "trainer.total_training_steps=4", f"trainer.default_local_dir={tmp_path}/train",
                           "buffer.trainer_input.experience_buffer.replay_buffer.enable=true",
                           "buffer.trainer_input.experience_buffer.replay_buffer.reuse_cooldown_time=0"]))
    buf = ExperienceBuffer(path) if storage == "sql" else JsonlBuffer(path)
    # both batches sampled by the starting weights: fresh ones first (older first), then each reused once
    assert buf.explored() == 2 and buf.claims() == [(1, 1), (2, 2), (3, 1), (4, 2)]
