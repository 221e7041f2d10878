"""COCO box average precision of one image's predicted boxes, as ROLL's detection reward computes it.

ROLL's ``DetectionRewardWorker`` (after MiniMax's One-RL-to-See-Them-All verifier) builds a one-image
COCO ground truth and result set from a reply's boxes and runs the COCO toolkit's box evaluation
(Lin et al., "Microsoft COCO", 2014; the toolkit's ``COCOeval``) with its default detection settings,
one area range ("all") and up to 100 detections. This module computes the same three numbers with
NumPy:

    AP    = mean over IoU thresholds t in {0.50, 0.55, ..., 0.95}, the 101 recall points r in
            {0, 0.01, ..., 1} and the labels k of the truth of  precision_k,t(r)
    AP50  = the same mean at t = 0.50 only;  AP75  at t = 0.75 only

where precision_k,t(r) is the interpolated precision (the best precision at any recall >= r) of
label k's predictions, in reply order, matched greedily to label k's truths at IoU >= t; 0 where
recall r is never reached. What ROLL's setup fixes and this code therefore assumes:

- every prediction has confidence 1.0, so the stable sort keeps the reply's order;
- predictions whose label is not among the truth's are left out (not false positives);
- no truth is a crowd region; a box whose area (w x h) exceeds 1e10 is "ignored", as COCO's
  area range [0, 1e5^2] makes it;
- IoU is the toolkit's box IoU on (x, y, w, h) boxes: 0 unless both overlaps are > 0.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)  # COCO's ten thresholds, 0.50:0.05:0.95
RECALL_POINTS = np.linspace(0.0, 1.0, 101)  # COCO's 101 recall points
MAX_DETECTIONS = 100
_AREA_MAX = 1e5**2  # COCO's "all" area range is [0, 1e5^2]
Box = Sequence[float]  # (x1, y1, x2, y2)


def box_iou_xywh(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """IoU (D, G) of (x, y, w, h) boxes as the COCO toolkit computes it (0 without overlap).

    >>> box_iou_xywh(np.array([[0., 0, 10, 10]]), np.array([[5., 0, 10, 10]])).round(4).tolist()
    [[0.3333]]
    """
    # overlap extents from (x, y, w, h), summed as the toolkit sums them (x + w, not x2)
    w = np.minimum(pred[:, None, 0] + pred[:, None, 2], truth[None, :, 0] + truth[None, :, 2]) - np.maximum(pred[:, None, 0], truth[None, :, 0])
    h = np.minimum(pred[:, None, 1] + pred[:, None, 3], truth[None, :, 1] + truth[None, :, 3]) - np.maximum(pred[:, None, 1], truth[None, :, 1])
    inter = w * h
    union = (pred[:, 2] * pred[:, 3])[:, None] + (truth[:, 2] * truth[:, 3])[None, :] - inter
    overlap = (w > 0) & (h > 0)
    return np.where(overlap, inter / np.where(overlap, union, 1.0), 0.0)  # (D, G)


def _xywh(boxes: list[Box]) -> np.ndarray:
    """(N, 4) (x, y, w, h) boxes from (x1, y1, x2, y2) ones."""
    out = np.array([[b[0], b[1], b[2] - b[0], b[3] - b[1]] for b in boxes], dtype=np.float64).reshape(-1, 4)
    return out  # (N, 4)


def _label_precision(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Interpolated precision (T, R) of one label's predictions (reply order) against its truths."""
    pred = pred[:MAX_DETECTIONS]
    out = np.zeros((len(IOU_THRESHOLDS), len(RECALL_POINTS)))
    truth_ignored = truth[:, 2] * truth[:, 3] > _AREA_MAX
    order = np.argsort(truth_ignored, kind="mergesort")  # regular truths first, as COCOeval sorts them
    truth, truth_ignored = truth[order], truth_ignored[order]
    real = int((~truth_ignored).sum())
    if len(pred) == 0 or real == 0:
        return out  # no prediction of this label: precision 0 at every recall point
    iou = box_iou_xywh(pred, truth)  # (D, G)
    pred_big = pred[:, 2] * pred[:, 3] > _AREA_MAX
    for t, threshold in enumerate(IOU_THRESHOLDS):
        taken = np.zeros(len(truth), dtype=bool)
        hit, skip = np.zeros(len(pred), dtype=bool), np.zeros(len(pred), dtype=bool)
        for d in range(len(pred)):
            best, m = min(threshold, 1 - 1e-10), -1
            for g in range(len(truth)):
                if taken[g]:
                    continue
                if m > -1 and not truth_ignored[m] and truth_ignored[g]:
                    break  # matched a regular truth; ignored ones come after it
                if iou[d, g] < best:
                    continue
                best, m = iou[d, g], g  # ties go to the later truth, as in COCOeval
            if m > -1:
                taken[m], hit[d], skip[d] = True, True, truth_ignored[m]
        skip |= ~hit & pred_big  # an unmatched prediction outside the area range is ignored too
        tp = np.cumsum(hit & ~skip).astype(float)
        fp = np.cumsum(~hit & ~skip).astype(float)
        recall = tp / real
        precision = tp / (tp + fp + np.spacing(1))  # COCOeval's epsilon: a perfect AP is 1 - 2e-16
        precision = np.maximum.accumulate(precision[::-1])[::-1]  # best precision at this recall or beyond
        at = np.searchsorted(recall, RECALL_POINTS, side="left")
        reached = at < len(precision)
        out[t, reached] = precision[at[reached]]  # recall points never reached keep precision 0
    return out


def coco_box_ap(pred: list[tuple[Box, str]], truth: list[tuple[Box, str]]) -> dict[str, float]:
    """COCO AP, AP50 and AP75 (module docstring) of ``pred`` against ``truth``, each a list of
    ((x1, y1, x2, y2), label); all 0 when no prediction names a label of the truth.

    >>> {k: round(v, 6) for k, v in coco_box_ap([((0, 0, 10, 10), "cat")], [((0, 0, 10, 10), "cat")]).items()}
    {'map': 1.0, 'map50': 1.0, 'map75': 1.0}
    >>> coco_box_ap([((0, 0, 10, 10), "dog")], [((0, 0, 10, 10), "cat")])
    {'map': 0.0, 'map50': 0.0, 'map75': 0.0}
    """
    labels = list(dict.fromkeys(label for _, label in truth))
    if not any(label in labels for _, label in pred):
        return {"map": 0.0, "map50": 0.0, "map75": 0.0}
    per_label = np.stack([
        _label_precision(_xywh([b for b, lb in pred if lb == label]), _xywh([b for b, lb in truth if lb == label]))
        for label in labels
    ])  # (K, T, R)
    # a label whose truths are all ignored has no precision (COCO's -1) and is left out of the means
    kept = np.array([bool((np.array([(b[2] - b[0]) * (b[3] - b[1]) for b, lb in truth if lb == label]) <= _AREA_MAX).any())
                     for label in labels])
    if not kept.any():
        return {"map": -1.0, "map50": -1.0, "map75": -1.0}
    per_label = per_label[kept]
    t50, t75 = 0, 5  # positions of 0.50 and 0.75 in IOU_THRESHOLDS
    return {"map": float(per_label.mean()), "map50": float(per_label[:, t50].mean()), "map75": float(per_label[:, t75].mean())}
