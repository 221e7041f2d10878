"""The ``detection`` scorer: ROLL's vision detection reward (``DetectionRewardWorker``, after the
V-Triune verifier of "One RL to See Them All", Ma et al., arXiv:2505.18129) for one reply.

The reply and the truth each hold boxes in an answer block,
``<answer>[{'bbox_2d': [x1, y1, x2, y2], 'label': 'dog'}, ...]</answer>``; the row's ``reward_model``
object (ROLL's data layout, which ``data.extra_info_keys: [reward_model]`` copies into extra_info)
gives the weights:

    score    = (accuracy_ratio x accuracy + format_ratio x format) / (accuracy_ratio + format_ratio)
    format   = 1 if the reply has "\\n<answer>\\n" and exactly one "\\n</answer>" and its answer holds
               a box, else 0
    accuracy = size_penalty x sum_s ratio_s x part_s / sum_s ratio_s        (0 when sum_s ratio_s = 0)

over the parts s of ``verifier_parm.det_reward_ratio`` (each in [0, 1]; a missing, null or
out-of-range ratio counts 0): ``iou_max_iou_first`` and ``iou_max_label_first`` (the IoU scores of
the two greedy matchings below) and ``map``, ``map50``, ``map75`` (COCO box AP,
posttrain.rewards.detection_map). ``size_penalty = 0.6 ** |#predicted - #true boxes|``.

An IoU score at threshold u, with M matches of P predicted and G true boxes and weight
c = ``det_reward_ratio.iou_completeness``:

    (1 - c) x (sum of the matches' IoU) / G + c x (1 - ((G - M) / G + (P - M) / P) / 2)

averaged over u in {0.5, 0.55, ..., 0.95, 0.99} (``iou_threshold: average``, ROLL's default) or taken
at one u. The matchings, as ROLL runs them:

- ``max_label_first``: each true box in turn takes the unmatched predicted box of its label with the
  highest IoU, if that IoU >= u;
- ``max_iou_first``: while both sides have unmatched boxes, the highest IoU among the unmatched pairs
  (stop if < u) counts as one match, worth that IoU when the labels agree, else 0. ROLL records the
  match against the *last* unmatched predicted and true box (its loop reuses the loop variables as
  the arg-max); posttrain pairs them the same way so that the rewards equal ROLL's.

Parsing follows ROLL: the first answer block of each side, lower-cased; ``[[``/``]]`` read as
``[``/``]``; a list cut off after a ``},`` is closed there; single quotes read as double quotes and
backslashes dropped; items without a 4-number ``bbox_2d`` with x1 <= x2 and y1 <= y2 or a string
``label`` are skipped, and a repeated box position counts once. A reply without boxes scores
accuracy 0; so does a truth without boxes (ROLL logs it and scores 0).

Boxes are compared as given, except for a policy that answers in pixels of its resized image
(Qwen2.5-VL; Qwen2-VL, Qwen3-VL and later answer on the 0..1000 grid of the truths): with
``patch_size`` set (that policy's image patch, 14 for Qwen2.5-VL) and the row's
``verifier_parm.det_verifier_normalized`` true, the reply's boxes are rescaled as ROLL's
``normalize_bbox_by_real_size`` does, by the row's first processed image (W x H pixels, its
``extra_info["image_grid_thw"][0]`` = (t, h, w) patches times the patch size):

    x -> int(x / W x 1000),   y -> int(y / H x 1000)        (int truncates toward zero, as ROLL)

after parsing and before matching (the format score reads the reply unscaled). A row without
image_grid_thw keeps its boxes (ROLL logs a warning and does the same). The end-of-turn marker the decoder
keeps is removed first (ROLL decodes without special tokens). ROLL keeps the reward as float16;
posttrain keeps float32.
"""

from __future__ import annotations

import json
import re
from typing import Any

from posttrain.errors import ConfigError, DataError
from posttrain.rewards.detection_map import coco_box_ap
from posttrain.rewards.think_answer import response_text

THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)
PARTS = ("iou_max_iou_first", "iou_max_label_first", "map", "map50", "map75")
SIZE_PENALTY_BASE = 0.6
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
Box = tuple[tuple[float, float, float, float], str]


def answer_block(text: str) -> str:
    """The first ``<answer>...</answer>`` block's text, stripped ("" when there is none)."""
    match = _ANSWER.search(text)
    return match.group(1).strip() if match else ""


def parse_boxes(text: str) -> list[Box] | None:
    """The (box, label) items of an answer's box list, or None when it holds none (module docstring).

    >>> parse_boxes("[{'bbox_2d': [1, 2, 3, 4], 'label': 'cat'}, {'bbox_2d': [1, 2, 3, 4], 'label': 'dog'}]")
    [((1, 2, 3, 4), 'cat')]
    >>> parse_boxes("[{'bbox_2d': [1, 2, 3, 4], 'label': 'cat'}, {'bbox_2d': [5, 6")
    [((1, 2, 3, 4), 'cat')]
    """
    if not text or not text.strip():
        return None
    text = text.replace("[[", "[").replace("]]", "]")
    if not text.endswith("]"):  # a list cut off mid-item: keep the items before the last "},"
        text = text.rsplit("},", 1)[0] + "}]"
    try:
        items = json.loads(text.replace("'", '"').replace("\\", ""))
    except (ValueError, RecursionError):
        return None
    if not isinstance(items, list):
        return None
    out, seen = [], set()
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("label"), str):
            continue
        box = item.get("bbox_2d")
        # ROLL's check: a list of 4 numbers (bool counts, being an int), x1 <= x2 and y1 <= y2
        if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)):
            continue
        if box[0] > box[2] or box[1] > box[3] or tuple(box) in seen:
            continue
        seen.add(tuple(box))
        out.append((tuple(box), item["label"]))
    return out or None


def rescale_boxes(boxes: list[Box], width: int, height: int) -> list[Box]:
    """Pixel boxes of a width x height image on the 0..1000 grid, as ROLL's
    ``normalize_bbox_by_real_size`` (divide, then scale, then truncate; a duplicate this makes stays).

    >>> rescale_boxes([((14, 28, 139, 560), 'cat')], 280, 560)
    [((50, 50, 496, 1000), 'cat')]
    """
    size = (width, height, width, height)
    return [(tuple(int(v / s * 1000.0) for v, s in zip(box, size)), label) for box, label in boxes]


def processed_size(extra_info: dict | None, verifier_parm: dict, patch_size: int | None) -> tuple[int, int] | None:
    """(W, H) pixels of the row's first processed image when its boxes are to be rescaled (module
    docstring), else None.

    >>> processed_size({"image_grid_thw": [[1, 40, 20]]}, {"det_verifier_normalized": True}, 14)
    (280, 560)
    """
    grids = (extra_info or {}).get("image_grid_thw")
    if patch_size is None or not verifier_parm.get("det_verifier_normalized") or not grids:
        return None
    _, h, w = grids[0]
    return int(w) * patch_size, int(h) * patch_size


def check_patch_size(patch_size: Any) -> int | None:
    """``patch_size`` checked: null (boxes compared as given) or a positive integer."""
    if patch_size is None or (isinstance(patch_size, int) and not isinstance(patch_size, bool) and patch_size > 0):
        return patch_size
    raise ConfigError(f"reward_kwargs.patch_size: {patch_size!r} is not a positive integer or null (the image patch of a "
                      "policy that answers in pixels, 14 for Qwen2.5-VL; null compares the boxes as given)")


def format_score(reply: str) -> float:
    """1.0 when the reply's answer block stands on its own lines, once, and holds a box; else 0.0.

    >>> format_score("<think>.</think>\\n<answer>\\n[{'bbox_2d': [0, 0, 1, 1], 'label': 'a'}]\\n</answer>")
    1.0
    """
    if not (reply.count("\n<answer>\n") and reply.count("\n</answer>") == 1):
        return 0.0
    return 1.0 if parse_boxes(answer_block(reply.strip()).lower()) else 0.0


def box_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """IoU of two (x1, y1, x2, y2) boxes; 0 without a positive overlap.

    >>> box_iou((0, 0, 10, 10), (5, 0, 15, 10))
    0.3333333333333333
    """
    w, h = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    return float(inter) / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def match_max_iou_first(pred: list[Box], truth: list[Box], threshold: float) -> list[float]:
    """The matched IoUs of ROLL's ``greedy_match_by_iou_max_iou_first`` (module docstring)."""
    iou = [[box_iou(p[0], t[0]) for t in truth] for p in pred]
    free_pred, free_truth, matches = list(range(len(pred))), list(range(len(truth))), []
    while free_pred and free_truth:
        best = max(iou[i][j] for i in free_pred for j in free_truth)
        if best < threshold:
            break
        i, j = free_pred[-1], free_truth[-1]  # ROLL's indices: the last unmatched pair, not the arg-max
        matches.append(best if pred[i][1] == truth[j][1] else 0.0)
        free_pred.remove(i)
        free_truth.remove(j)
    return matches


def match_max_label_first(pred: list[Box], truth: list[Box], threshold: float) -> list[float]:
    """The matched IoUs of ROLL's ``greedy_match_by_iou_max_label_first`` (module docstring)."""
    taken: set[int] = set()
    matches = []
    for box, label in truth:
        options = [(box_iou(p, box), i) for i, (p, lb) in enumerate(pred) if i not in taken and lb == label]
        if not options:
            continue
        best, i = max(options, key=lambda o: (o[0], -o[1]))  # the first of equal IoUs, as np.argmax
        if best >= threshold:
            matches.append(best)
            taken.add(i)
    return matches


def iou_score(pred: list[Box], truth: list[Box], matches: list[float], completeness: float) -> float:
    """(1 - c) x mean IoU over the truths + c x completeness (module docstring)."""
    mean_iou = sum(matches) / len(truth) if matches else 0.0
    miss = (len(truth) - len(matches)) / len(truth)
    false_alarm = (len(pred) - len(matches)) / len(pred) if pred else 0.0
    return mean_iou * (1.0 - completeness) + (1.0 - (miss + false_alarm) / 2.0) * completeness


def _ratios(verifier_parm: Any) -> dict[str, float]:
    """det_reward_ratio with ROLL's rule: a missing, null or out-of-[0, 1] entry counts 0."""
    given = verifier_parm.get("det_reward_ratio") if isinstance(verifier_parm, dict) else None
    given = given if isinstance(given, dict) else {}
    out = {}
    for key in (*PARTS, "iou_completeness"):
        value = given.get(key)
        out[key] = float(value) if isinstance(value, (int, float)) and 0 <= value <= 1 else 0.0
    return out


def accuracy_parts(reply: str, truth_text: str, ratios: dict[str, float], threshold: float | str,
                   image_size: tuple[int, int] | None = None) -> dict[str, float]:
    """The accuracy and its parts before weighting; all 0 when either side has no boxes. With
    ``image_size`` (W, H) the reply's pixel boxes are rescaled to the 0..1000 grid first."""
    pred = parse_boxes(answer_block(reply.strip()).lower())
    truth = parse_boxes(answer_block(str(truth_text).strip()).lower())
    if pred is None or truth is None:
        return {"accuracy": 0.0, "size_penalty": 0.0, **{p: 0.0 for p in PARTS}}
    if image_size is not None:
        pred = rescale_boxes(pred, *image_size)
    chosen = THRESHOLDS if threshold == "average" else (float(threshold),)
    c = ratios["iou_completeness"]
    parts = {
        "iou_max_iou_first": sum(iou_score(pred, truth, match_max_iou_first(pred, truth, u), c) for u in chosen) / len(chosen),
        "iou_max_label_first": sum(iou_score(pred, truth, match_max_label_first(pred, truth, u), c) for u in chosen) / len(chosen),
        **coco_box_ap(pred, truth),
    }
    penalty = SIZE_PENALTY_BASE ** abs(len(pred) - len(truth))
    total = sum(ratios[p] for p in PARTS)
    accuracy = sum(parts[p] * penalty * ratios[p] for p in PARTS) / total if total > 0 else 0.0
    return {"accuracy": accuracy, "size_penalty": penalty, **parts}


def check_threshold(iou_threshold: Any) -> float | str:
    """``iou_threshold`` checked: "average" or one of THRESHOLDS (ROLL's DET_IOU_THRESHOLD values)."""
    if iou_threshold == "average":
        return "average"
    if isinstance(iou_threshold, (int, float)) and not isinstance(iou_threshold, bool) and float(iou_threshold) in THRESHOLDS:
        return float(iou_threshold)
    raise ConfigError(f"reward_kwargs.iou_threshold: {iou_threshold!r} is not 'average' or one of {', '.join(map(str, THRESHOLDS))} "
                      "(the IoU thresholds of the detection scorer)")


def detection_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                    iou_threshold: float | str = "average", patch_size: int | None = None) -> dict[str, float]:
    """ROLL's detection reward of one reply (module docstring), with its parts.

    >>> row = {"reward_model": {"format_ratio": 0.1, "accuracy_ratio": 1.0, "verifier_parm": {
    ...     "det_reward_ratio": {"iou_max_label_first": 1.0, "iou_completeness": 0.3}}}}
    >>> truth = "<answer>[{'bbox_2d': [0, 0, 10, 10], 'label': 'cat'}]</answer>"
    >>> reply = "<think>one cat</think>\\n<answer>\\n[{'bbox_2d': [0, 0, 10, 10], 'label': 'cat'}]\\n</answer>"
    >>> detection_score("coco", reply, truth, row)["score"]
    1.0
    >>> half = reply.replace("10, 10", "10, 20")  # IoU 0.5: matched at u = 0.5 only, (0.7 x 0.5 + 0.3) / 11
    >>> round(detection_score("coco", half, truth, row)["score"], 6) == round((0.65 / 11 + 0.1) / 1.1, 6)
    True
    """
    threshold, patch_size = check_threshold(iou_threshold), check_patch_size(patch_size)
    reward_model = (extra_info or {}).get("reward_model")
    if not isinstance(reward_model, dict) or not isinstance(reward_model.get("verifier_parm"), dict):
        raise DataError(
            f"the detection scorer reads the row's reward_model.verifier_parm.det_reward_ratio (ROLL's layout) from "
            f"extra_info['reward_model'], which this {data_source or 'row'} sample lacks: set data.extra_info_keys: "
            "[reward_model] and give detection rows a reward_model object with verifier_parm")
    reply = response_text(solution_str)
    fmt = format_score(reply)
    verifier_parm = reward_model["verifier_parm"]
    size = processed_size(extra_info, verifier_parm, patch_size)
    parts = accuracy_parts(reply, ground_truth, _ratios(verifier_parm), threshold, size)
    format_ratio = float(reward_model.get("format_ratio", 0.1))
    accuracy_ratio = float(reward_model.get("accuracy_ratio", 1.0))
    total = accuracy_ratio + format_ratio
    score = parts["accuracy"] * (accuracy_ratio / total) + fmt * (format_ratio / total)  # ROLL's order of operations
    return {"score": score, "format": fmt, **parts}
