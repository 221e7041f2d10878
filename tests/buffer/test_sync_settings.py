"""What the synchronizer and buffer keys decide, without starting processes: when a stage splits
into explorer and trainer, how far behind the explorer may sample, where the buffer lives, and how
long the explorer waits for weights."""

from __future__ import annotations

import pytest

from posttrain.buffer.sqlite import BufferError, ExperienceBuffer
from posttrain.buffer.weights import WeightFiles
from posttrain.config.load import load_config
from posttrain.trainer.decoupled import buffer_path, half_of, is_decoupled, max_staleness, validation_steps
from posttrain.trainer.sync import Follower


@pytest.mark.parametrize(
    "overrides, split, staleness",
    [([], False, 0), (["synchronizer.sync_interval=2"], True, 1), (["synchronizer.sync_offset=1"], True, 1),
     (["synchronizer.sync_interval=3", "synchronizer.sync_offset=2"], True, 4),
     (["synchronizer.sync_interval=2", "algorithm.kind=sft"], False, 1),
     (["rollout.hybrid_engine=false"], True, 0),  # the engine in a process of its own, on-policy
     (["cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.rollout=[1]"], True, 0)],
)
def test_interval_and_offset_decide_the_split_and_the_staleness_bound(overrides, split, staleness):
    cfg = load_config(None, overrides)
    assert (is_decoupled(cfg), max_staleness(cfg)) == (split, staleness)


def test_mode_picks_the_half_and_validation_follows_the_trainer_settings():
    assert half_of(load_config(None, ["trainer.mode=explore"])) == "explorer"
    assert half_of(load_config(None, ["trainer.mode=train"])) == "trainer"
    assert half_of(load_config(None, [])) is None
    cfg = load_config(None, ["data.val_files=[v.parquet]", "trainer.test_freq=3", "trainer.val_before_train=true"])
    assert validation_steps(cfg, 7) == [0, 3, 6, 7]


def test_the_buffer_file_is_named_by_the_buffer_name_unless_a_path_is_given(tmp_path):
    assert buffer_path(load_config(None, []), tmp_path) == tmp_path / "experience_buffer.sqlite"
    named = load_config(None, ["buffer.trainer_input.experience_buffer.name=mine"])
    assert buffer_path(named, tmp_path) == tmp_path / "mine.sqlite"
    url = load_config(None, [f"buffer.trainer_input.experience_buffer.path=sqlite:///{tmp_path}/x.db"])
    assert buffer_path(url, tmp_path) == tmp_path / "x.db"


def test_the_explorer_waits_sync_timeout_for_fresh_weights_then_names_the_trainer(tmp_path):
    buffer = ExperienceBuffer(tmp_path / "b.sqlite")
    buffer.report("trainer", "training step 1")
    follow = Follower(explorer=None, buffer=buffer, weights=WeightFiles(tmp_path / "w"), timeout_s=0.2, steps=[])
    with pytest.raises(BufferError, match=r"waited 0.2 s for the weights of trainer step 2 \(newest published: none; "
                                          r"trainer: training step 1"):
        follow.freshen(2)
    follow.freshen(0)  # the first batches need no published weights
    assert follow.loaded == 0


def test_sync_methods_and_workflow_keys_are_answered_with_their_reasons():
    for method in ("nccl", "checkpoint", "memory", "online", "offline"):  # a process group or files (test_weight_channel.py)
        assert load_config(None, [f"synchronizer.sync_method={method}"]).synchronizer.sync_method == method
    from posttrain.config.dialects import translate

    raw = {"explorer": {"max_timeout": 60, "max_retry_times": 2, "over_rollout": {"ratio": 0.5, "wait_after_min": 9}}}
    entries = {e.key: (e.status, e.reason) for e in translate(raw, "trinity")[1].entries}
    assert entries["explorer.max_timeout"][0] == entries["explorer.max_retry_times"][0] == "translated"  # a prompt group's deadline
    assert entries["explorer.over_rollout.ratio"][0] == "refused" and "with synchronizer.sync_style fixed (its default)" in entries["explorer.over_rollout.ratio"][1]
    assert entries["explorer.over_rollout.wait_after_min"][0] == "dropped"  # read only with a ratio
