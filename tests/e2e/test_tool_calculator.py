"""examples/tool_calculator.yaml through the real CLI, scaled down by editing a copy of the example:
its `prepare` section builds the tiny model and the tool_calc data, the SFT warm-up teaches the call
format and copying, then GRPO over the multi-turn conversations raises the reward and the share of
correct calculator calls (read from the stage's metrics.jsonl).

About 35 s of CPU for the CLI run (133 s under `--durations` on a loaded 2-core machine): the
warm-up needs ~120 SFT steps before the model copies the factors into its calls. Marked `long`, it
runs with `python -m pytest -m long`. It passes on its own seeds only: with
`prepare.model.tiny.seed: 2` the warm-up has not learned to copy, and GRPO raises the reward by
answering without the tool, so the correct-call check fails (docs/agentic.md, "What
examples/tool_calculator.yaml measured", has every seed's numbers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tool_calculator.yaml"
STEPS = 20  # GRPO steps


@pytest.mark.long
def test_sft_warm_up_then_grpo_raises_the_reward_and_the_correct_calls(tmp_path, monkeypatch):
    config = yaml.safe_load(EXAMPLE.read_text())
    # one layer with one 64-wide head learns to copy the factors into the call and the tool's answer
    # into the reply after ~110 SFT steps at lr 1e-2 (the example's 3-layer model: ~220 at 1e-3)
    config["prepare"]["model"]["tiny"] = {"layers": 1, "hidden": 64, "heads": 1}
    config["prepare"]["data"].update(options={"digits": 1}, test=16)
    config["actor"].update(ppo_mini_batch_size=4, optim={"lr": 5e-4})  # two updates per step
    config["trainer"].update(total_training_steps=STEPS, test_freq=-1, val_before_train=False, logger=["jsonl"])
    sft = config["stages"][0]
    sft["trainer"]["total_training_steps"] = 120  # copying half learned: GRPO starts from sampled rewards ~0.7
    sft["actor"]["optim"]["lr"] = 1e-2
    (tmp_path / "tool.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copytree(ROOT / "examples" / "tools", tmp_path / "examples" / "tools")  # the example's relative tool_config_path
    monkeypatch.chdir(tmp_path)
    assert main(["train", "tool.yaml"]) == 0
    run = tmp_path / config["trainer"]["default_local_dir"] / "grpo"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "critic/score/mean" in r]
    assert len(steps) == STEPS
    half = STEPS // 2
    for key, margin in (("critic/score/mean", 0.05), ("reward/correct_call", 0.02)):
        first, last = (sum(r[key] for r in part) / half for part in (steps[:half], steps[half:]))
        assert last > first + margin, (key, first, last)  # measured: reward 0.72 -> 0.84, correct calls 0.878 -> 0.914
