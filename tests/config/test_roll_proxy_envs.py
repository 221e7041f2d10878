"""ROLL's agent-runner example (ProxyEnvManager + GEMRunner on every custom_envs entry) plans as
posttrain's prompt_mode conversation with the instruction in the system message; another runner is
refused with its reason (posttrain.envs.runner_spec)."""

from __future__ import annotations

from pathlib import Path

from posttrain.cli import main

FILE = Path(__file__).parent / "corpus" / "roll" / "qwen2.5-0.5B-agentic" / "agentic_val_sokoban_agent_runner.yaml"
MACHINE = "rollout.name=vllm: vLLM is not installed"  # this CPU machine's lack, as for ROLL's other agentic files


def plan(capsys, *overrides: str) -> list[str]:
    assert main(["config", "plan", "--dialect", "roll", str(FILE), *overrides]) == 2
    err = capsys.readouterr().err
    return [line[4:] for line in err.splitlines() if line.startswith("  - ")] or [err]


def test_the_agent_runner_example_plans_but_for_the_machine(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    problems = plan(capsys)
    assert len(problems) == 1 and MACHINE in problems[0], problems


def test_another_agent_runner_is_refused_with_the_reason(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    problems = plan(capsys, "agent_runner_cls=roll.pipeline.agentic.agent_runner.gem_runner.ToolCallRunner")
    refused = [p for p in problems if "agent_runner_cls" in p]
    assert len(refused) == 5 and all("ToolCallRunner': not supported: posttrain plays ROLL's ProxyEnvManager with its GEMRunner" in p
                                     for p in refused), problems
