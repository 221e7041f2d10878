"""ROLL's DetectionRewardWorker becomes a `detection` reward worker: the row's reward_model object is
copied into extra_info, rows are tagged by data_source (ROLL's vision-language reader),
DET_IOU_THRESHOLD becomes reward_kwargs.iou_threshold; a Qwen2.5-VL worker's patch size (read from
the model directory) becomes reward_kwargs.patch_size; the dynamic threshold is refused."""

from __future__ import annotations

import pytest

from posttrain.config.dialects import translate
from posttrain.config.dialects.roll_detection import qwen25_vl

WORKER = "roll.pipeline.rlvr.rewards.detection_reward_worker.DetectionRewardWorker"
MATH = "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker"


def _raw(model: str = "Qwen/Qwen3-VL-4B-Instruct", **data_args) -> dict:
    return {
        "pretrain": model,
        "actor_train": {"data_args": {"file_name": ["det.parquet"], **data_args}},
        "rewards": {
            "math": {"worker_cls": MATH, "model_args": {"model_name_or_path": model}, "tag_included": ["mm_math"], "world_size": 8},
            "cv_detection": {"worker_cls": WORKER, "model_args": {"model_name_or_path": model},
                             "tag_included": ["v3det_train", "coco_val_multi_test"], "world_size": 8, "infer_batch_size": 1},
        },
    }


def test_a_detection_worker_translates_with_the_row_weights_and_data_source_tags(monkeypatch):
    monkeypatch.delenv("DET_IOU_THRESHOLD", raising=False)
    native, report = translate(_raw(), "roll")
    worker = native["reward"]["workers"]["cv_detection"]
    assert worker == {"worker_cls": "detection", "tag_included": ["v3det_train", "coco_val_multi_test"], "world_size": 8}
    assert native["data"]["extra_info_keys"] == ["reward_model"]  # format_ratio, accuracy_ratio, verifier_parm
    assert native["data"]["reward_fn_key"] == "data_source"  # ROLL's vision-language reader
    assert report.entry("rewards.cv_detection.model_args").status == "dropped"
    assert not report.refused
    # a custom data reader keeps ROLL's tag column
    native, _ = translate(_raw(custom_data_kwargs_func="my.module.fn"), "roll")
    assert native["data"]["reward_fn_key"] == "tag"


@pytest.mark.parametrize("value, expected", [("0.75", 0.75), ("average", "average"), ("0.42", None)])
def test_the_iou_threshold_comes_from_roll_s_environment_variable(monkeypatch, value, expected):
    monkeypatch.setenv("DET_IOU_THRESHOLD", value)
    native, report = translate(_raw(), "roll")
    kwargs = native["reward"]["workers"]["cv_detection"].get("reward_kwargs")
    assert kwargs == (None if expected is None else {"iou_threshold": expected})
    if expected is None:  # ROLL logs an error and averages
        assert report.entry("DET_IOU_THRESHOLD (environment, rewards.cv_detection)").status == "dropped"


def test_the_dynamic_threshold_is_refused(monkeypatch):
    monkeypatch.setenv("DET_IOU_THRESHOLD", "dynamic")
    _, report = translate(_raw(), "roll")
    assert "training step" in report.entry("DET_IOU_THRESHOLD (environment, rewards.cv_detection)").reason


def test_a_qwen2_5_vl_worker_rescales_by_its_processor_s_patch_size(monkeypatch, tmp_path):
    monkeypatch.setenv("DET_IOU_THRESHOLD", "0.5")
    native, report = translate(_raw("Qwen/Qwen2.5-VL-7B-Instruct"), "roll")  # not on this machine: the family's 14
    assert native["reward"]["workers"]["cv_detection"]["reward_kwargs"] == {"patch_size": 14, "iou_threshold": 0.5}
    assert report.entry("rewards.cv_detection.model_args").status == "translated" and not report.refused
    (tmp_path / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    (tmp_path / "preprocessor_config.json").write_text('{"patch_size": 16}')  # the directory's processor wins
    raw = _raw(str(tmp_path))
    del raw["rewards"]["cv_detection"]["model_args"]  # ROLL's worker then loads pretrain's processor
    native, report = translate(raw, "roll")
    assert native["reward"]["workers"]["cv_detection"]["reward_kwargs"] == {"patch_size": 16, "iou_threshold": 0.5}
    assert report.native_origin()["reward.workers.cv_detection.reward_kwargs.patch_size"] == "pretrain"


def test_a_local_model_directory_is_told_by_its_config_s_model_type(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    assert qwen25_vl(str(tmp_path)) and not qwen25_vl(str(tmp_path.parent)) and qwen25_vl("/m/Qwen2_5-VL-3B")
    (tmp_path / "config.json").write_text('{"model_type": "qwen3_vl"}')
    assert not qwen25_vl(str(tmp_path))
