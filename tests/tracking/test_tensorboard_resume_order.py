"""A resumed TensorBoard writer's event file sorts after the files already there, so the reader sees
its purge marker after the events it supersedes (it reads a directory's files in name order)."""

from __future__ import annotations

import time

from posttrain.tracking.trackers import TensorBoardTracker


def test_a_resumed_writer_starts_a_later_second_than_existing_files(tmp_path):
    log_dir = tmp_path / "tensorboard"
    log_dir.mkdir()
    now = int(time.time())
    # A file of a run killed this very second, by a process with a larger pid than ours would have.
    old = log_dir / f"events.out.tfevents.{now:010d}.host.99999999.1"
    old.write_bytes(b"")
    tracker = TensorBoardTracker(tmp_path, purge_step=5)
    tracker.log({"x": 1.0}, step=5)
    tracker.close()
    names = sorted(p.name for p in log_dir.iterdir())
    assert len(names) == 2 and names[0] == old.name  # the new file reads after the old one
    assert int(names[1].split(".")[3]) > now
