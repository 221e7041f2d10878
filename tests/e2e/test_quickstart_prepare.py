"""The `prepare` section: builds what is missing, reuses what matches, refuses what does not."""

from __future__ import annotations

import json

import pytest

from posttrain.config import load_config
from posttrain.errors import ConfigError
from posttrain.trainer.prepare import MARKER, prepare


def _cfg(tmp_path, *overrides):
    return load_config(None, [f"prepare.model.path={tmp_path}/model", "prepare.model.tiny.hidden=32",
                              "prepare.model.tiny.layers=1", f"prepare.data.dir={tmp_path}/data",
                              "prepare.data.task=arithmetic", "prepare.data.train=20", "prepare.data.test=5",
                              "prepare.data.options={digits: 1, partial_credit: 0.5}", *overrides]).prepare


def test_builds_then_reuses_then_refuses_other_settings(tmp_path):
    said: list[str] = []
    prepare(_cfg(tmp_path), said.append)
    assert said == [f"prepare: built a tiny Qwen2 model (1 layers, hidden 32) in {tmp_path}/model",
                    f"prepare: built the arithmetic task (20 train, 5 test, 20 SFT rows, 0 DPO pairs) in {tmp_path}/data"]
    assert (tmp_path / "model" / "model.safetensors").is_file()
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [MARKER, "sft_train.parquet", "test.parquet", "train.parquet"]
    built = json.loads((tmp_path / "data" / MARKER).read_text())
    assert built["options"] == {"digits": 1, "ops": ["+"], "partial_credit": 0.5}  # task defaults filled in
    assert not list(tmp_path.glob(".*partial*"))  # built in a hidden directory, then renamed

    said.clear()
    prepare(_cfg(tmp_path), said.append)
    assert all("reusing" in line and "same settings" in line for line in said) and len(said) == 2

    with pytest.raises(ConfigError, match=r"prepare.model: .* was built with other settings \(hidden: 32 there, 64 asked\); delete"):
        prepare(_cfg(tmp_path, "prepare.model.tiny.hidden=64"))
    with pytest.raises(ConfigError, match=r"prepare.data: .*train: 20 there, 30 asked"):
        prepare(_cfg(tmp_path, "prepare.data.train=30"))


def test_hand_made_directories_are_reused_as_they_are(tmp_path):
    prepare(_cfg(tmp_path), lambda line: None)
    (tmp_path / "model" / MARKER).unlink()
    said: list[str] = []
    prepare(_cfg(tmp_path, "prepare.model.tiny.hidden=64"), said.append)
    assert said[0] == f"prepare: reusing {tmp_path}/model as it is (not built by prepare, so its settings are not checked)"
    (tmp_path / "other").mkdir()
    with pytest.raises(ConfigError, match="other exists but has no config.json"):
        prepare(_cfg(tmp_path, f"prepare.model.path={tmp_path}/other"))


@pytest.mark.parametrize("override, message", [
    ("prepare.data.task=sorting", "prepare.data.task: unknown task 'sorting'; known tasks: arithmetic, colour, countdown, sort"),
    ("prepare.data.options={digit: 2}", "prepare.data.options: task 'arithmetic' has no option 'digit'"),
    ("prepare.model.tiny.heads=3", "prepare.model.tiny: --hidden 32 must be divisible by --heads 3"),
    # a range the generator checks: refused before the model is built too
    ("prepare.data.options={digits: 0}", "prepare.data.options: digits must be between 1 and 18, got 0"),
])
def test_mistakes_are_refused_before_anything_is_built(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        prepare(_cfg(tmp_path, override))
    assert not (tmp_path / "model").exists() and not (tmp_path / "data").exists()


def test_nothing_to_prepare_by_default():
    said: list[str] = []
    prepare(load_config(None).prepare, said.append)
    assert said == []


def test_a_stage_cannot_set_prepare(tmp_path):
    from posttrain.trainer.prepare import refuse_stage_prepare

    cfg = load_config(None, ["stages=[{name: a}, {name: b, prepare: {data: {train: 5}}}]"])
    with pytest.raises(ConfigError, match=r"stages\[1\].prepare: prepare runs once before all stages"):
        refuse_stage_prepare(cfg.stages)
