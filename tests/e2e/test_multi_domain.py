"""examples/multi_domain.yaml through the real CLI, shrunk to seconds: two domains (sort, arithmetic)
scored by two reward workers with their own scorers, batches drawn half and half by domain, the
arithmetic groups without signal dropped; the metrics hold each worker's score per step, the groups
dropped, and each domain's validation score. (Whether the full example learns
is measured by running it, not here: docs/rewards.md gives the measured numbers.)"""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from posttrain.tracking import trackers

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multi_domain.yaml"


def test_the_multi_domain_example_reports_each_domain(tmp_path, monkeypatch, capsys):
    config = yaml.safe_load(EXAMPLE.read_text())
    config["trainer"].update(total_training_steps=4, test_freq=2, logger=["console", "jsonl"])
    for stage in config["stages"][:2]:  # the two SFT warm-ups
        stage["trainer"]["total_training_steps"] = 1
    (tmp_path / "multi_domain.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    make_tiny_model(tmp_path / "outputs" / "tiny-model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", tmp_path / "outputs" / "sort", train=64, test=8, sft=64, dpo=0)
    write_task_data("arithmetic", tmp_path / "outputs" / "arithmetic", train=64, test=8, sft=64, dpo=0)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "multi_domain.yaml"]) == 0
    console = capsys.readouterr().out

    rows = [json.loads(line) for line in (tmp_path / "outputs/runs/multi_domain/rl/metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/sort/count" in r]
    assert [r["step"] for r in steps] == [3, 4, 5, 6]  # global steps: after the 2 SFT steps
    for r in steps:
        assert r["reward/sort/count"] + r["reward/arithmetic/count"] == 16 * 8  # every response, one worker each
        assert r["reward/sort/failures"] == 0 and r["reward/arithmetic/failures"] == 0
        assert 0 <= r["reward/arithmetic/mean"] <= 1 and r["reward/sort/time_s"] >= 0
        # a random model's sums are all wrong: every arithmetic group is dropped, every sort group kept
        assert r["query_filter/arithmetic/dropped"] == r["reward/arithmetic/count"] / 8 == r["query_filter/dropped_groups"]
    sorted_share = sum(r["reward/sort/count"] for r in steps) / (4 * 128)
    assert 0.2 < sorted_share < 0.8  # drawn at 0.5: 64 prompts, so a wide band
    validations = [r for r in rows if "val/posttrain/sort/score/mean@1" in r]
    assert len(validations) == 3  # before RL, at step 2, at step 4
    for r in validations:
        assert "val/posttrain/arithmetic/score/mean@1" in r and "val/posttrain/arithmetic/acc/mean@1" in r
    last = next(line for line in console.splitlines() if line.startswith("[rl] step 4/4"))
    assert f"val[sort] {validations[-1]['val/posttrain/sort/score/mean@1']:.4f}".rstrip("0") in last
    assert "val[arithmetic] " in last


def test_the_console_shows_each_domain_validation_score():
    assert doctest.testmod(trackers).failed == 0
