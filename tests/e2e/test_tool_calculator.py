"""examples/tool_calculator.yaml through the real CLI, scaled down by editing a copy of the example:
its `prepare` section builds a one-layer tiny model and the tool_calc data with 1-digit factors, the
SFT warm-up teaches the call format and copying, then GRPO over the multi-turn conversations raises
the sampled reward and the share of correct calculator calls (read from the stage's metrics.jsonl).

The configuration: one attention layer with one 64-wide head; 300 SFT steps (batch 32, lr 5e-3,
constant, then a linear decay over the last 30 steps); 40 GRPO steps (8 prompts x 8 conversations
sampled at temperature 1.3, lr 5e-4, two updates per step). The test compares the mean over the first
10 GRPO steps with the mean over the last 10, as tests/e2e/test_grpo_learns.py does. Measured with
model seed = trainer seed (2026-11-27, transformers 5.24, torch 2.13 CPU):

    seed 1  reward 0.505 -> 0.586  correct calls 0.530 -> 0.613
    seed 2  reward 0.369 -> 0.544  correct calls 0.430 -> 0.625
    seed 3  reward 0.464 -> 0.600  correct calls 0.498 -> 0.620

(An earlier version compared the two halves of the run; with the current packages seed 1's halves
rose by only 0.040, 0.501 -> 0.541, the reward climbing late, so the halves hid a rise the tens show.)

All three seeds are `long` (`python -m pytest -m long`; seed 1 takes about 100 s in the CI suite on
2 cores): run them when the tool loop, the configuration or the packages change.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tool_calculator.yaml"
STEPS = 40  # GRPO steps
# long: about 100 s in the CI suite, over its budget. CI checks the tool loop's turns, masks, rewards and
# resume in tests/trainer/test_tool_stage.py and that GRPO learns through an environment's turns in
# tests/e2e/test_agentic_grpo.py.
SEEDS = [pytest.param(1, marks=pytest.mark.long),
         pytest.param(2, marks=pytest.mark.long),
         pytest.param(3, marks=pytest.mark.long)]


def scaled_example(seed: int) -> dict:
    """The example with the model, digits, SFT schedule and GRPO length of the module docstring."""
    config = yaml.safe_load(EXAMPLE.read_text())
    # one layer with one 64-wide head learns to copy the factors into the call, and the tool's answer
    # into the reply, sooner than the example's 3 layers (docs/agentic.md)
    config["prepare"]["model"]["tiny"] = {"layers": 1, "hidden": 64, "heads": 1, "seed": seed}
    config["prepare"]["data"].update(options={"digits": 1}, test=16)
    config["actor"].update(ppo_mini_batch_size=4, optim={"lr": 5e-4})  # two updates per step
    config["trainer"].update(total_training_steps=STEPS, test_freq=-1, val_before_train=False, logger=["jsonl"], seed=seed)
    sft = config["stages"][0]
    sft["trainer"]["total_training_steps"] = 300
    # lr 5e-3 leaves the copying plateau by step ~150 on every seed measured, and the wsd schedule's
    # decay over the last 30 steps settles it (1e-2 is faster on some seeds, but spikes after copying)
    sft["actor"]["optim"] = {"lr": 5e-3, "lr_scheduler_type": "wsd"}
    # GRPO samples at 1.3: after a warm-up that copies, temperature 1 leaves a sampled reward of ~0.9
    # that 40 steps do not move beyond the noise; at 1.3 it starts near 0.5 and GRPO sharpens the policy
    config["stages"][1]["rollout"] = {"temperature": 1.3}
    return config


@pytest.mark.parametrize("seed", SEEDS)
def test_sft_warm_up_then_grpo_raises_the_reward_and_the_correct_calls(seed, tmp_path, monkeypatch):
    config = scaled_example(seed)
    (tmp_path / "tool.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copytree(ROOT / "examples" / "tools", tmp_path / "examples" / "tools")  # the example's relative tool_config_path
    monkeypatch.chdir(tmp_path)
    assert main(["train", "tool.yaml"]) == 0
    run = tmp_path / config["trainer"]["default_local_dir"] / "grpo"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "critic/score/mean" in r]
    assert len(steps) == STEPS
    for key, margin in (("critic/score/mean", 0.05), ("reward/correct_call", 0.05)):
        first, last = (sum(r[key] for r in part) / 10 for part in (steps[:10], steps[-10:]))
        assert last > first + margin, (seed, key, first, last)  # measured: the module docstring
