"""ROLL's vision detection reward worker (``DetectionRewardWorker``) onto the ``detection`` scorer.

ROLL's worker (roll/pipeline/rlvr/rewards/detection_reward_worker.py) scores a reply's boxes
against the row's ``reward_model.ground_truth`` with the weights of the row's ``reward_model``
object (format_ratio, accuracy_ratio, verifier_parm.det_reward_ratio); posttrain's scorer reads that
object from extra_info, so the translation adds ``reward_model`` to ``data.extra_info_keys``.

- ``DET_IOU_THRESHOLD`` (an environment variable ROLL's worker reads; unset: ``average``) becomes the
  worker's ``reward_kwargs.iou_threshold``; ``dynamic`` (a threshold that rises with the training
  step) is refused, and a value outside ROLL's list falls back to ``average`` as in ROLL.
- A file with a detection worker runs ROLL's vision-language pipeline, whose data reader tags each
  row by ``data_source``: ``data.reward_fn_key: data_source`` (unless a custom_data_kwargs_func
  reads the data instead).
- ``model_args`` is dropped: ROLL loads that model's processor only to rescale a Qwen2.5-VL
  policy's pixel boxes to the 0..1000 grid of the truth (``det_verifier_normalized``), using each
  row's processed image size. posttrain's scorers are called with the reply text and the row, not
  the processed image, so a worker whose model is Qwen2.5-VL (its config.json's model_type, or its
  name when the directory is not on this machine) is refused whole; the other VL families answer on
  the 0..1000 grid, where ROLL compares boxes as given too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posttrain.config.dialects.translate import Context

DETECTION = "detection"
WORKER_CLS = "roll.pipeline.rlvr.rewards.detection_reward_worker.DetectionRewardWorker"
VISION_TAGS = ("ROLL's vision-language pipeline (the one its detection worker runs in) tags each row by its data_source "
               "column, not data_args.tag")
THRESHOLD_ENV = "DET_IOU_THRESHOLD"
# ROLL's DetectionVerifier accepts these (a float, or "average" / "dynamic")
_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)
MODEL_ARGS = ("ROLL's detection worker loads this model's processor only to rescale a Qwen2.5-VL policy's pixel boxes "
              "(refused for Qwen2.5-VL); for other models it compares the boxes as given, as the detection scorer does")
_QWEN25_VL_NAME = re.compile(r"qwen2[._]?5[-_]?vl", re.IGNORECASE)


def vision_pipeline(ctx: Context, workers: Mapping[str, Any]) -> bool:
    """Whether the file runs ROLL's vision-language RLVR pipeline with its own data reader: the only
    pipeline whose batches carry the image inputs its detection worker reads, whose reader (without
    actor_train.data_args.custom_data_kwargs_func) tags each row by its data_source column."""
    detection = any(isinstance(spec, Mapping) and spec.get("worker_cls") == WORKER_CLS for spec in workers.values())
    return detection and ctx.get("actor_train.data_args.custom_data_kwargs_func") is None


def qwen25_vl(path: Any) -> bool:
    """Whether ``path`` is a Qwen2.5-VL model: its config.json's model_type, else its name.

    >>> qwen25_vl("Qwen/Qwen2.5-VL-7B-Instruct"), qwen25_vl("Qwen/Qwen3-VL-4B-Instruct")
    (True, False)
    """
    if not isinstance(path, str) or not path:
        return False
    config = Path(path).expanduser() / "config.json"
    if config.is_file():
        try:
            return json.loads(config.read_text()).get("model_type") == "qwen2_5_vl"
        except (OSError, ValueError):
            pass
    return bool(_QWEN25_VL_NAME.search(Path(path).name or path))


def refusal(ctx: Context, spec: Mapping[str, Any]) -> str | None:
    """Why this detection worker cannot be translated (a Qwen2.5-VL model), else None."""
    model_args = spec.get("model_args")
    model = model_args.get("model_name_or_path") if isinstance(model_args, Mapping) else None
    model = model or ctx.get("pretrain")
    if not qwen25_vl(model):
        return None
    return (f"ROLL's detection reward rescales a Qwen2.5-VL policy's boxes ({model}) from pixels of its resized input "
            "image to the 0..1000 grid of the truth, using each row's processed image size; posttrain's scorers are "
            "called with the reply text and the row, not the processed image, so they would compare pixel boxes with "
            "grid boxes. Qwen2-VL, Qwen3-VL and later answer on the 0..1000 grid: with one of them the worker "
            "translates to the detection scorer")


def worker(ctx: Context, name: str) -> None:
    """The extra settings of detection worker ``name``: the row's reward_model in extra_info, and the
    IoU threshold ROLL takes from its environment."""
    keys = ctx.native.get("data", {}).get("extra_info_keys", [])
    if "reward_model" not in keys:  # once, for the first detection worker
        ctx.set("data.extra_info_keys", [*keys, "reward_model"], f"rewards.{name}.worker_cls",
                "ROLL's detection worker reads the row's reward_model object (format_ratio, accuracy_ratio, verifier_parm)")
    value = os.environ.get(THRESHOLD_ENV)
    if value is None:
        return
    source = f"{THRESHOLD_ENV} (environment, rewards.{name})"
    native = f"reward.workers.{name}.reward_kwargs"
    if value == "dynamic":
        ctx.refuse(source, "ROLL's dynamic IoU threshold rises with the training step (0.85, then 0.95 after 10% of "
                   "max_steps, 0.99 after 25%); posttrain's scorers are functions of the reply and its row, not of the "
                   "step: set average or one threshold", native, value)
        return
    try:
        threshold: float | str = float(value)
    except ValueError:
        threshold = value
    if threshold not in (*_THRESHOLDS, "average"):
        ctx.drop(source, f"{value!r} is not average, dynamic or one of {', '.join(map(str, _THRESHOLDS))}: ROLL logs an "
                 "error and averages over the thresholds, as posttrain's default does")
        return
    ctx.set(native, {"iou_threshold": threshold}, source, "the IoU threshold of the detection scorer's IoU parts")
