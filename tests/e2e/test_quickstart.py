"""The quickstart machinery through the real CLI, shrunk to seconds: `prepare` builds the model and
the data, the stages run, the summary prints accuracy before/after RL (greedy and sampled), where
things are, and writes the report; a rerun says the run is complete. (Whether the full quickstart
learns is measured by benchmarks/quickstart_seeds.py, not here: it takes minutes.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
SHRINK = ["trainer.total_training_steps=4", "trainer.test_freq=2", "prepare.data.train=64",
          "prepare.data.test=16", "prepare.data.sft=320"]


def _train(cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "posttrain", "train", "quickstart.yaml", *SHRINK],
                         cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_quickstart_from_a_fresh_directory(tmp_path):
    config = yaml.safe_load(EXAMPLE.read_text())
    assert config["stages"][0]["name"] == "sft"
    config["stages"][0]["trainer"]["total_training_steps"] = 5
    (tmp_path / "quickstart.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    out = _train(tmp_path).stdout
    assert "prepare: built a tiny Qwen2 model (3 layers, hidden 128) in outputs/tiny-model" in out
    assert "prepare: built the arithmetic task (64 train, 16 test, 320 SFT rows, 0 DPO pairs)" in out

    run = tmp_path / "outputs" / "runs" / "quickstart"
    rows = [json.loads(line) for line in (run / "grpo" / "metrics.jsonl").read_text().splitlines()]
    val = [r["val/posttrain/arithmetic/acc/mean@1"] for r in rows if "val/posttrain/arithmetic/acc/mean@1" in r]
    assert len(val) == 3  # before training, at step 2, at step 4
    lines = out.splitlines()
    assert f"accuracy before RL: {100 * val[0]:.1f}%" in lines
    assert f"accuracy after RL: {100 * val[-1]:.1f}%" in lines
    assert lines.index(f"accuracy before RL: {100 * val[0]:.1f}%") + 1 == lines.index(f"accuracy after RL: {100 * val[-1]:.1f}%")
    sampled = [line for line in lines if line.startswith("sampled accuracy")]
    assert [re.sub(r"[\d.]+%$", "X", line) for line in sampled] == [
        "sampled accuracy before RL (temperature 1, 4 per prompt): X",
        "sampled accuracy after RL (temperature 1, 4 per prompt): X",
    ]
    assert "TensorBoard logs: tensorboard --logdir outputs/runs/quickstart" in lines
    assert "exported model (Hugging Face directory): outputs/runs/quickstart/grpo/final_model" in lines
    assert (run / "grpo" / "final_model" / "model.safetensors").is_file()
    assert "report: outputs/runs/quickstart/report.html" in lines
    report = (run / "report.html").read_text()
    assert report.count("<svg") >= 8 and "Validation samples of stage grpo" in report

    again = _train(tmp_path).stdout
    assert "prepare: reusing outputs/tiny-model (built earlier with the same settings)" in again
    assert "the run is complete" in again
    assert f"accuracy after RL: {100 * val[-1]:.1f}%" in again
