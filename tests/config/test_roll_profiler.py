"""ROLL's profiler_memory and profiler_output_dir: posttrain's torch_memory profile of every step."""

from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.config.checks_profiler import every_step_memory


def test_profiler_memory_is_torch_memory_alone_with_python_stacks_in_the_output_dir():
    native, report = translate({"profiler_memory": True, "profiler_output_dir": "/tmp/prof"}, "roll")
    assert not report.refused
    assert native["profiler"] == {"tool": "torch_memory", "torch_memory": {"stacks": "python"}, "save_path": "/tmp/prof"}
    cfg = load_config(None, ["profiler.tool=torch_memory", "profiler.torch_memory.stacks=python"])
    assert every_step_memory(cfg)  # every step on every rank, as the translation says


def test_without_a_profiler_the_switch_and_folder_change_nothing():
    native, report = translate({"profiler_memory": False, "profiler_output_dir": "/tmp/prof"}, "roll")
    assert "profiler" not in native and not report.refused
    assert "RAY_PROFILING" in report.entry("profiler_output_dir").reason
    _, report = translate({"profiler_memory": "yes"}, "roll")
    assert "expected true or false" in report.entry("profiler_memory").reason
