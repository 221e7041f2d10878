"""synchronizer.sync_style: which weights sample each batch when explorer and trainer run at different
speeds, with the real explorer side (`Follower`) and trainer side (`Publisher`) and fake work.

Time is counted in ticks, deterministically: the explorer spends `explore` ticks per batch, the
trainer `train` ticks per step, and the trainer advances one tick whenever the explorer polls while
it waits. The trainer's loop is run_learner's: wait for batch s (answering the explorer while it
waits), train, then `after_step`.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from posttrain.buffer.sqlite import ExperienceBuffer
from posttrain.buffer.sync_requests import SyncRequests
from posttrain.buffer.weights import WeightFiles
from posttrain.trainer.sync import Follower, Publisher


def versions_per_batch(tmp_path, style: str, *, interval: int, batches: int, explore: int, train: int | None,
                       offset: int = 0) -> list[int]:
    """The trainer step whose weights sampled each batch (`train` None: a trainer that only answers)."""
    weights = WeightFiles(tmp_path / "weights")
    written: list[int] = []

    def trainer():
        publisher = Publisher(lambda k: weights.publish({"w": torch.tensor([float(k)])}, k), weights, style, interval, {batches}, 0)
        for step in range(1, batches + 1 if train is not None else 1):
            while len(written) < step:  # the claim's wait
                publisher.answer()
                yield
            for _ in range(train):
                yield
            publisher.after_step(step)
        while True:
            publisher.answer()
            yield

    ticks = trainer()
    engine = SimpleNamespace(update_weights=lambda state, step: None)
    buffer = ExperienceBuffer(tmp_path / "buffer.sqlite")
    follow = Follower(SimpleNamespace(roles=SimpleNamespace(engine=engine)), buffer, weights, 5.0, [], style, interval)
    follow.sleep = lambda _: next(ticks)
    next(ticks)  # the trainer starts: it publishes its starting weights
    sampled = []
    for b in range(1, batches + 1):
        follow.before_batch(b, interval - 1 + offset)
        for _ in range(explore):
            next(ticks)
        sampled.append(follow.loaded)
        written.append(b)
    buffer.close()
    return sampled


def test_a_slow_trainer_fixed_waits_for_its_schedule_dynamic_by_explorer_takes_what_is_trained(tmp_path):
    slow_trainer = dict(interval=2, batches=6, explore=1, train=10)
    # fixed: batch b waits for step b-2's weights, published every 2 steps
    assert versions_per_batch(tmp_path / "f", "fixed", **slow_trainer) == [0, 0, 2, 2, 4, 4]
    # the explorer asks after every 2 batches and gets the step the trainer is in when it finishes
    # it: step 1 (while batch 3 waits), then step 2 (batch 5); it never waits for a schedule
    assert versions_per_batch(tmp_path / "e", "dynamic_by_explorer", **slow_trainer) == [0, 0, 1, 1, 2, 2]
    # the trainer asks only after 2 trained steps: by then the fast explorer wrote every batch
    assert versions_per_batch(tmp_path / "t", "dynamic_by_trainer", **slow_trainer) == [0] * 6


def test_a_slow_explorer_syncs_when_the_trainer_asks_with_dynamic_by_trainer(tmp_path):
    slow_explorer = dict(interval=2, batches=6, explore=10, train=1)
    assert versions_per_batch(tmp_path / "f", "fixed", **slow_explorer) == [0, 0, 2, 2, 4, 4]
    # the explorer asks right after writing batch 2, while the trainer trains step 2: answered with 2
    assert versions_per_batch(tmp_path / "e", "dynamic_by_explorer", **slow_explorer) == [0, 0, 2, 2, 4, 4]
    # the trainer wants a sync after step 2, which it trains after batch 3's sampling began; the
    # explorer sees the wish before batch 4 and asks while the trainer trains step 3: answered with
    # 3. The next wish comes after step 5, during batch 6: no sync after that.
    assert versions_per_batch(tmp_path / "t", "dynamic_by_trainer", **slow_explorer) == [0, 0, 0, 3, 3, 3]


def test_an_answer_without_newer_weights_leaves_the_explorer_due(tmp_path, monkeypatch):
    """Trinity-RFT's last_sync_successful: the trainer answers with the weights the explorer holds
    (it trained nothing since), so the explorer asks again before its next batch."""
    requests = SyncRequests(tmp_path)
    assert requests.pending() is None and requests.trainer_wants() is None
    first = requests.ask(held=0)
    assert requests.pending() == (first, 0) and requests.answer_to(first) is None
    requests.want(3)
    requests.answer(first, 0)
    assert requests.pending() is None and requests.answer_to(first) == 0 and requests.trainer_wants() is None
    assert requests.ask(held=0) == first + 1  # ids keep counting across both files

    # a trainer that trains nothing answers every request with the starting weights: with interval
    # 2 the explorer asks at the start, before batch 3, and, that sync having brought nothing new,
    # again before batch 4
    asked = []
    original = SyncRequests.ask
    monkeypatch.setattr(SyncRequests, "ask", lambda self, held: asked.append(held) or original(self, held))
    got = versions_per_batch(tmp_path / "idle", "dynamic_by_explorer", interval=2, batches=4, explore=1, train=None)
    assert got == [0, 0, 0, 0] and len(asked) == 3


@pytest.mark.parametrize("style", ["dynamic_by_explorer", "dynamic_by_trainer"])
def test_dynamic_styles_split_the_stage_and_refuse_an_offset(style):
    from posttrain.config.load import load_config
    from posttrain.errors import ConfigError
    from posttrain.trainer.decoupled import is_decoupled

    assert is_decoupled(load_config(None, [f"synchronizer.sync_style={style}"]))  # even at interval 1
    with pytest.raises(ConfigError, match=f"with sync_style={style} the explorer syncs when a side asks, and sync_offset is not read"):
        load_config(None, [f"synchronizer.sync_style={style}", "synchronizer.sync_offset=1"])


def test_trinity_names_translate_and_a_staleness_limit_is_refused_with_a_dynamic_style():
    from posttrain.config.dialects import translate

    raw = {"synchronizer": {"sync_style": "explorer_driven", "sync_interval": 2},  # Trinity-RFT 0.5's name
           "algorithm": {"sample_strategy": "staleness_control", "sample_strategy_args": {"staleness_limit": 4}}}
    out, report = translate(raw, "trinity")
    assert out["synchronizer"]["sync_style"] == "explorer_driven"
    refused = {e.key: e.reason for e in report.entries if e.status == "refused"}
    assert "with synchronizer.sync_style explorer_driven only the buffer's capacity bounds" in refused["algorithm.sample_strategy"]
    # with the fixed style the same limit is within posttrain's bound (interval 2: one step behind at most)
    raw["synchronizer"]["sync_style"] = "fixed"
    assert "algorithm.sample_strategy" not in {e.key for e in translate(raw, "trinity")[1].entries if e.status == "refused"}


def test_every_trainer_rank_publishes_when_rank_0_answers_but_only_rank_0_writes(tmp_path):
    """Several trainer ranks: rank 0 reads the request and decides; the others follow its decision
    (World.from_main) and take part in publishing (a collective when the actor is sharded)."""
    weights = WeightFiles(tmp_path)
    SyncRequests(tmp_path).ask(held=0)
    rank0_decision = []
    published = {"rank0": [], "rank1": []}

    def record(d):
        rank0_decision.append(d)
        return d

    def publish(rank):
        return lambda k: published[rank].append(k) or (weights.publish({"w": torch.zeros(1)}, k) if rank == "rank0" else None)

    rank0 = Publisher(publish("rank0"), weights, "dynamic_by_explorer", 2, set(), 0, SimpleNamespace(is_main=True, from_main=record))
    rank1 = Publisher(publish("rank1"), weights, "dynamic_by_explorer", 2, set(), 0, SimpleNamespace(is_main=False, from_main=lambda _: rank0_decision[-1]))
    assert rank0_decision[-1][0] is not None  # the start's answer: rank 0 answered the pending request
    rank0.trained = rank1.trained = 1
    request = SyncRequests(tmp_path).ask(held=0)
    rank0.answer()
    rank1.answer()
    assert published == {"rank0": [0, 1], "rank1": [0, 1]}
    assert SyncRequests(tmp_path).answer_to(request) == 1 and weights.latest() == 1
