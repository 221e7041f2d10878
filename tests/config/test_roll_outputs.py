"""ROLL's rollout_dump_dir: an absolute path is posttrain's trainer.rollout_data_dir; a relative one,
to which ROLL writes nothing, is dropped (posttrain.config.dialects.roll_outputs)."""

from __future__ import annotations

import pytest

from posttrain.config.dialects import translate


@pytest.mark.parametrize(("path", "status", "native"), [
    ("/data/rollout_dump", "translated", "/data/rollout_dump"),
    ("./output/rollout_dump", "dropped", None),
    (None, "dropped", None),
    (3, "refused", None),
])
def test_rollout_dump_dir(path, status, native):
    got, report = translate({"rollout_dump_dir": path}, "roll")
    entry = report.entry("rollout_dump_dir")
    assert entry.status == status and got.get("trainer", {}).get("rollout_data_dir") == native
    if path == "./output/rollout_dump":
        assert "only under an absolute path" in entry.reason


def test_track_with_ml_tracker_is_refused_as_roll_itself_has_no_such_tracker():
    _, report = translate({"track_with": "ml_tracker"}, "roll")
    assert "Unknown tracker name" in report.entry("track_with").reason
