import io
import json

import pytest

from posttrain.errors import ConfigError
from posttrain.tracking import ConsoleTracker, build_trackers, format_console_line


def test_console_line_is_compact_and_has_eta():
    line = format_console_line({"critic/score/mean": 0.5, "actor/lr": 1e-5, "other": 3.0}, 3, 10, 75.0)
    assert line == "step 3/10 | score 0.5 | lr 1.00e-05 | eta 1m15s"


def test_console_tracker_eta_from_mean_step_time():
    times = iter([0.0, 10.0, 20.0])
    out = io.StringIO()
    tracker = ConsoleTracker(total_steps=5, stream=out, clock=lambda: next(times))
    tracker.log({}, 1)  # 10 s per step so far, 4 steps left
    tracker.log({}, 2)  # 10 s per step, 3 left
    lines = out.getvalue().splitlines()
    assert lines == ["step 1/5 | eta 0m40s", "step 2/5 | eta 0m30s"]


def test_jsonl_and_tensorboard_write_files(tmp_path):
    trackers = build_trackers(["jsonl", "tensorboard"], tmp_path, 2)
    trackers.log({"a": 1.5, "b": float("nan")}, 1)
    trackers.log({"a": 2.5}, 2)
    trackers.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "a": 1.5, "b": None}, {"step": 2, "a": 2.5}]
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0


def test_unknown_and_unsupported_trackers_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="trainer.logger: unknown tracker 'tensorbord'"):
        build_trackers(["tensorbord"], tmp_path, None)
    with pytest.raises(ConfigError, match="trainer.logger: tracker 'clearml': not implemented: posttrain has adapters for wandb"):
        build_trackers(["clearml"], tmp_path, None)


def test_console_shows_stage_local_steps_with_label():
    out = io.StringIO()
    times = iter([0.0, 5.0])
    tracker = ConsoleTracker(total_steps=10, stream=out, clock=lambda: next(times), step_offset=30, label="grpo")
    tracker.log({"critic/score/mean": 0.25}, 31)
    assert out.getvalue().splitlines() == ["[grpo] step 1/10 | score 0.25 | eta 0m45s"]


def test_log_freq_sends_every_nth_step_plus_validation_and_the_last(tmp_path):
    from posttrain.tracking.trackers import build_trackers

    trackers = build_trackers(["jsonl"], tmp_path, total_steps=7, step_offset=10, log_freq=3)
    trackers.log({"val/score/mean": 0.1}, 10)  # validation before training (stage step 0)
    for local in range(1, 8):
        metrics = {"loss": float(local)}
        if local == 5:
            metrics["val/score/mean"] = 0.5  # a validation step off the log grid
        trackers.log(metrics, 10 + local)
    trackers.close()
    import json

    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 13, 15, 16, 17]  # 0, 3, 5 (validation), 6, 7 (last)
