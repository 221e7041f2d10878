"""trainer.worker_nsight_options: the processes that compute start under `nsys profile` with the options,
checked with a fake nsys on PATH that records its arguments and runs the command."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from posttrain.cli import main
from posttrain.cli.train import _nsight_prefix
from posttrain.cluster.launch import launch
from posttrain.cluster.nsight import UNDER_NSYS_ENV, nsys_arguments
from posttrain.config import load_config
from posttrain.errors import ConfigError

FAKE_NSYS = """#!/bin/sh
# record the arguments, one per line, then run what follows "--" (as nsys profile runs the application)
printf '%s\\n' "$@" >> "$NSYS_RECORD"
[ "$NSYS_RUN" = no ] && exit 0
while [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""
NSYS = ("profiler.tool=nsys", "profiler.steps=[1,3]", "actor.profiler.enable=true",
        "trainer.worker_nsight_options={trace: 'cuda,nvtx', cuda-memory-usage: true, capture-range: cudaProfilerApi, capture-range-end: null}")


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text(FAKE_NSYS)
    (bin_dir / "nsys").chmod(0o755 | stat.S_IXUSR)
    record = tmp_path / "nsys_args.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NSYS_RECORD", str(record))
    monkeypatch.delenv(UNDER_NSYS_ENV, raising=False)
    return record


def test_options_become_nsys_arguments():
    got = nsys_arguments({"trace": "cuda,nvtx", "cuda-memory-usage": True, "capture-range-end": None, "kill": "none", "t": "osrt", "x": None}, windows=2)
    # null capture-range-end: stop after the last of the 2 traced windows; another null is nsys's own default
    assert got == ["--trace=cuda,nvtx", "--cuda-memory-usage=true", "--capture-range-end=repeat-shutdown:2", "--kill=none", "-t", "osrt"]


def test_workers_start_under_nsys_with_the_options(fake_nsys, tmp_path, monkeypatch):
    cfg = load_config(None, list(NSYS))
    assert _nsight_prefix(load_config(None, NSYS[:-1]), tmp_path) is None  # no options: start posttrain under nsys yourself
    prefix = _nsight_prefix(cfg, tmp_path)
    assert os.environ[UNDER_NSYS_ENV] == "1"  # what the processes started under nsys inherit: they do not wrap themselves again
    assert launch(["--version"], 2, tmp_path, "cpu", {}, prefix=prefix) == 0  # both workers ran under the fake nsys
    lines = fake_nsys.read_text().splitlines()
    assert lines.count("profile") == 2 and lines.count("--trace=cuda,nvtx") == 2
    assert "--capture-range-end=repeat-shutdown:2" in lines and "--cuda-memory-usage=true" in lines
    assert {f"--output={tmp_path / 'profile' / f'nsys_rank{r}'}" for r in (0, 1)} <= set(lines)
    assert lines[lines.index("--") + 1: lines.index("--") + 4] == [sys.executable, "-m", "posttrain"]


def test_a_single_process_run_restarts_itself_under_nsys(fake_nsys, tmp_path, monkeypatch, capsys):
    import posttrain.trainer.run as run

    monkeypatch.setattr(run, "check_run", lambda cfg: [])  # the checks a CPU machine fails (nsys needs a GPU) are the child's
    monkeypatch.setenv("NSYS_RUN", "no")  # record only: that the command runs under nsys is the test above's
    (tmp_path / "run.yaml").write_text("trainer: {logger: []}\n")
    code = main(["train", str(tmp_path / "run.yaml"), *NSYS, f"trainer.default_local_dir={tmp_path / 'run'}"])
    lines = fake_nsys.read_text().splitlines()
    assert lines[0] == "profile" and "--trace=cuda,nvtx" in lines and lines[lines.index("--") + 4] == "train"
    assert code == 0  # nsys's exit status is the command's


def test_without_nsys_the_options_are_refused_naming_the_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys here
    with pytest.raises(ConfigError, match="needs the nsys program, which is not on PATH on this machine"):
        _nsight_prefix(load_config(None, list(NSYS)), tmp_path)


def test_stages_profiling_with_nsys_count_their_windows_and_must_agree_on_options(fake_nsys, tmp_path):
    rl = "{name: rl, profiler: {tool: nsys, steps: [2]}, actor: {profiler: {enable: true}}}"
    cfg = load_config(None, ["trainer.worker_nsight_options={capture-range-end: null}", f"stages=[{{name: sft}}, {rl}]"])
    prefix = _nsight_prefix(cfg, tmp_path)  # the RL stage's overrides ask for nsys: one traced window
    assert "--capture-range-end=repeat-shutdown:1" in prefix(0)
    other = rl.replace("actor:", "trainer: {worker_nsight_options: {trace: cuda}}, actor:")
    with pytest.raises(ConfigError, match="stages that profile with nsys give different options"):
        _nsight_prefix(load_config(None, ["trainer.worker_nsight_options={capture-range-end: null}", f"stages=[{rl}, {other.replace('name: rl', 'name: rl2')}]"]), tmp_path)


def test_discrete_ranges_repeat_without_a_count(fake_nsys, tmp_path):
    # nsys discrete: a capture range per phase, as many per step as the run's phases: `repeat` (a report
    # each), never `repeat-shutdown:N`, which would stop the run after N ranges
    cfg = load_config(None, [*NSYS, "actor.profiler.discrete=true"])
    prefix = _nsight_prefix(cfg, tmp_path)
    assert "--capture-range-end=repeat" in prefix(0) and not any("repeat-shutdown" in a for a in prefix(0))


def test_nsys_discrete_opens_a_capture_range_around_each_phase_of_an_enabled_role(tmp_path, monkeypatch):
    import contextlib

    import torch

    from posttrain.trainer.profile_tools import NsysRanges
    from posttrain.trainer.profiling import StepProfiler, profile_plan

    calls = []
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))

    @contextlib.contextmanager
    def nvtx(name):
        calls.append(f"<{name}")
        yield
        calls.append(f"{name}>")

    monkeypatch.setattr(torch.cuda.nvtx, "range", nvtx)
    base = ["profiler.tool=nsys", "profiler.steps=[1]", "actor.profiler.enable=true"]
    for discrete, expected in ((True, ["start", "<gen", "gen>", "stop", "<values", "values>", "start", "<update_actor", "update_actor>", "stop"]),
                               (False, ["start", "<gen", "gen>", "<values", "values>", "<update_actor", "update_actor>", "stop"])):
        calls.clear()
        plan = profile_plan(load_config(None, [*base, f"actor.profiler.discrete={str(discrete).lower()}"]), 0, tmp_path, "cuda")
        profiler = StepProfiler(plan, NsysRanges(plan))
        with profiler.step(1):
            for phase in ("gen", "values", "update_actor"):  # values: the critic's, whose profiler is off
                with profiler.phase(phase):
                    pass
        assert calls == expected, discrete
