"""verl's global nsys `discrete` reaches each profiled role as posttrain's `profiler.discrete`: false
(verl's default) is one capture range per profiled step, true a capture range per phase of the role,
as verl gives each worker task its own; with no role profiled it has nothing to act on."""

from __future__ import annotations

from posttrain.config.dialects.verl_launch import launch

NSYS = ["global_profiler.tool=nsys", "global_profiler.steps=[1]"]
KEY = "global_profiler.global_tool_config.nsys.discrete"


def _run(*words: str):
    cfg, report, _ = launch(None, [*NSYS, *words])
    return cfg, [e for e in report.entries if e.key == KEY]


def test_discrete_reaches_the_profiled_roles_and_is_dropped_without_one():
    for value, expected in (("False", False), ("True", True)):
        cfg, (entry,) = _run("actor_rollout_ref.actor.profiler.enable=True", f"{KEY}={value}")
        assert entry.status == "translated" and cfg["actor"]["profiler"]["discrete"] is expected, value
    _, (entry,) = _run(f"{KEY}=True")
    assert entry.status == "dropped"  # no role profiles: the roles' own keys say so
