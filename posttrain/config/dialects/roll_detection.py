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
- ``model_args``: ROLL loads that model's processor to learn whether the policy answers in pixels of
  its resized image (a processor class named ``Qwen2_5...``: Qwen2.5-VL, Qwen2.5-Omni) and, if so,
  its image patch size, by which it rescales the reply's boxes to the 0..1000 grid of the truth for
  rows whose ``verifier_parm.det_verifier_normalized`` is set. The translation reads the same from
  the model directory (config.json's model_type and preprocessor_config.json's patch_size; the
  name, and the family's patch of 14, when the directory is not on this machine) into
  ``reward_kwargs.patch_size``; the other VL families answer on the 0..1000 grid, where ROLL and
  the scorer compare boxes as given.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posttrain.config.dialects.model_files import image_patch_size
from posttrain.config.dialects.translate import Context

DETECTION = "detection"
WORKER_CLS = "roll.pipeline.rlvr.rewards.detection_reward_worker.DetectionRewardWorker"
VISION_TAGS = ("ROLL's vision-language pipeline (the one its detection worker runs in) tags each row by its data_source "
               "column, not data_args.tag")
THRESHOLD_ENV = "DET_IOU_THRESHOLD"
# ROLL's DetectionVerifier accepts these (a float, or "average" / "dynamic")
_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)
MODEL_ARGS = ("ROLL's detection worker loads this model's processor only to rescale a pixel-answering policy's boxes "
              "(Qwen2.5-VL, whose patch size becomes reward_kwargs.patch_size); for this model it compares the boxes as "
              "given, as the detection scorer does")
_PIXEL_FAMILY = re.compile(r"qwen2[._]?5[-_]?(vl|omni)", re.IGNORECASE)
_PIXEL_MODEL_TYPES = ("qwen2_5_vl", "qwen2_5_omni")  # ROLL's test: the processor's class name starts with Qwen2_5
FAMILY_PATCH = 14  # the image patch of Qwen2.5-VL's processor (transformers' default), when no directory says


def vision_pipeline(ctx: Context, workers: Mapping[str, Any]) -> bool:
    """Whether the file runs ROLL's vision-language RLVR pipeline with its own data reader: the only
    pipeline whose batches carry the image inputs its detection worker reads, whose reader (without
    actor_train.data_args.custom_data_kwargs_func) tags each row by its data_source column."""
    detection = any(isinstance(spec, Mapping) and spec.get("worker_cls") == WORKER_CLS for spec in workers.values())
    return detection and ctx.get("actor_train.data_args.custom_data_kwargs_func") is None


def qwen25_vl(path: Any) -> bool:
    """Whether ``path`` is a model that answers in pixels (Qwen2.5-VL, Qwen2.5-Omni): its config.json's
    model_type, else its name.

    >>> qwen25_vl("Qwen/Qwen2.5-VL-7B-Instruct"), qwen25_vl("Qwen/Qwen3-VL-4B-Instruct")
    (True, False)
    """
    if not isinstance(path, str) or not path:
        return False
    config = Path(path).expanduser() / "config.json"
    if config.is_file():
        try:
            return json.loads(config.read_text()).get("model_type") in _PIXEL_MODEL_TYPES
        except (OSError, ValueError):
            pass
    return bool(_PIXEL_FAMILY.search(Path(path).name or path))


def patch_size(ctx: Context, spec: Mapping[str, Any]) -> int | None:
    """The image patch by which ROLL rescales this worker's policy's pixel boxes (its model's
    preprocessor_config.json's patch_size, else the family's 14), or None for a model that answers on
    the 0..1000 grid."""
    model_args = spec.get("model_args")
    model = model_args.get("model_name_or_path") if isinstance(model_args, Mapping) else None
    model = model or ctx.get("pretrain")
    if not qwen25_vl(model):
        return None
    return image_patch_size(model) or FAMILY_PATCH


def model(ctx: Context, name: str, spec: Mapping[str, Any]) -> None:
    """The worker's model (``model_args``, else ``pretrain``): a pixel-answering policy's patch size
    into ``reward_kwargs.patch_size``; any other model's processor ROLL does not use."""
    source = f"rewards.{name}.model_args" if "model_args" in spec else "pretrain"
    patch = patch_size(ctx, spec)
    if patch is not None:
        ctx.set(f"reward.workers.{name}.reward_kwargs.patch_size", patch, source,
                "ROLL rescales this Qwen2.5-VL policy's pixel boxes by each row's processed image (grid x patch) "
                "when the row's verifier_parm.det_verifier_normalized is set")
    elif source != "pretrain":
        ctx.drop(source, MODEL_ARGS)


def worker(ctx: Context, name: str, spec: Mapping[str, Any]) -> None:
    """The extra settings of detection worker ``name``: the row's reward_model in extra_info, the
    patch size of a pixel-answering policy named by pretrain and the IoU threshold ROLL takes from
    its environment."""
    keys = ctx.native.get("data", {}).get("extra_info_keys", [])
    if "reward_model" not in keys:  # once, for the first detection worker
        ctx.set("data.extra_info_keys", [*keys, "reward_model"], f"rewards.{name}.worker_cls",
                "ROLL's detection worker reads the row's reward_model object (format_ratio, accuracy_ratio, verifier_parm)")
    if "model_args" not in spec:  # model_args itself is translated with the worker's keys
        model(ctx, name, spec)
    threshold = _threshold(ctx, name, f"reward.workers.{name}.reward_kwargs")
    if threshold is not None:
        ctx.set(f"reward.workers.{name}.reward_kwargs.iou_threshold", threshold, f"{THRESHOLD_ENV} (environment, rewards.{name})",
                "the IoU threshold of the detection scorer's IoU parts")


def _threshold(ctx: Context, name: str, native: str) -> float | str | None:
    """DET_IOU_THRESHOLD as the scorer's iou_threshold; None when unset, refused or dropped."""
    value = os.environ.get(THRESHOLD_ENV)
    if value is None:
        return None
    source = f"{THRESHOLD_ENV} (environment, rewards.{name})"
    if value == "dynamic":
        ctx.refuse(source, "ROLL's dynamic IoU threshold rises with the training step (0.85, then 0.95 after 10% of "
                   "max_steps, 0.99 after 25%); posttrain's scorers are functions of the reply and its row, not of the "
                   "step: set average or one threshold", native, value)
        return None
    try:
        threshold: float | str = float(value)
    except ValueError:
        threshold = value
    if threshold not in (*_THRESHOLDS, "average"):
        ctx.drop(source, f"{value!r} is not average, dynamic or one of {', '.join(map(str, _THRESHOLDS))}: ROLL logs an "
                 "error and averages over the thresholds, as posttrain's default does")
        return None
    return threshold
