"""verl's nsys `discrete`: false (its default) is posttrain's nsys capture, one range per profiled step
with an NVTX range per phase; true (a range per worker task) is refused with that reason."""

from __future__ import annotations

from posttrain.config.dialects.verl_launch import launch

NSYS = ["global_profiler.tool=nsys", "global_profiler.steps=[1]"]
KEY = "global_profiler.global_tool_config.nsys.discrete"


def _entries(*words: str):
    _, report, _ = launch(None, [*NSYS, *words])
    return [e for e in report.entries if e.key == KEY]


def test_discrete_false_is_posttrain_s_capture_and_true_is_refused():
    (false,) = _entries(f"{KEY}=False")
    assert false.status == "dropped"  # verl's own default: what posttrain's nsys tool does
    (true,) = _entries(f"{KEY}=True")
    assert true.status == "refused"
    assert "each worker task its own nsys capture range" in true.reason and "set it false" in true.reason
