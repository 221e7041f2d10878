"""The detection scorer (ROLL's DetectionRewardWorker reward): hand-computed scores for perfect,
partial, wrong-class, missing, malformed and multiple boxes, the COCO AP, the row's weights.

The numbers were also checked during development against ROLL's own verifier run on 1,600 random
replies (equal to 2e-16), and the Qwen2.5-VL rescaling on 300 random pixel replies (equal to 2e-16);
ROLL is not imported here."""

from __future__ import annotations

import pytest

from posttrain.errors import ConfigError, DataError
from posttrain.rewards.detection import detection_score, parse_boxes, rescale_boxes
from posttrain.rewards.detection_map import coco_box_ap
from posttrain.rewards.scorers import load_scorer

CAT, DOG = [0, 0, 10, 10], [20, 20, 30, 30]


def _boxes(*items) -> str:
    return "[" + ", ".join("{'bbox_2d': %s, 'label': '%s'}" % (box, label) for box, label in items) + "]"


def _reply(body: str) -> str:
    return f"<think>I look.</think>\n<answer>\n{body}\n</answer>"


def _truth(*items) -> str:
    return f"<answer>\n{_boxes(*items)}\n</answer>"


def _row(format_ratio=0.1, accuracy_ratio=1.0, **ratios) -> dict:
    ratios = ratios or {"iou_max_label_first": 1.0, "iou_completeness": 0.3}
    return {"reward_model": {"format_ratio": format_ratio, "accuracy_ratio": accuracy_ratio,
                             "verifier_parm": {"det_verifier_normalized": True, "det_reward_ratio": ratios}}}


def _score(reply: str, truth: str, row: dict | None = None, **kwargs) -> dict:
    return detection_score("coco_val", reply, truth, _row() if row is None else row, **kwargs)


def test_a_perfect_box_scores_one_and_the_end_of_turn_marker_is_ignored():
    out = _score(_reply(_boxes((CAT, "cat"))) + "<|im_end|>", _truth((CAT, "cat")))
    assert out["score"] == pytest.approx(1.0) and out["format"] == 1.0 and out["size_penalty"] == 1.0
    assert out["map"] == pytest.approx(1.0) and out["iou_max_iou_first"] == pytest.approx(1.0)


def test_a_half_overlapping_box_counts_at_the_thresholds_it_reaches():
    # IoU([0,0,10,20], [0,0,10,10]) = 100 / 200 = 0.5: matched at u = 0.5 only, of 11 thresholds:
    # 0.7 x 0.5 (mean IoU) + 0.3 x 1 (complete) = 0.65 there, 0.7 x 0 + 0.3 x 0 elsewhere
    reply, truth = _reply(_boxes(([0, 0, 10, 20], "cat"))), _truth((CAT, "cat"))
    out = _score(reply, truth)
    assert out["iou_max_label_first"] == pytest.approx(0.65 / 11)
    assert out["score"] == pytest.approx((0.65 / 11) * (1 / 1.1) + 1.0 * (0.1 / 1.1))
    assert _score(reply, truth, iou_threshold=0.5)["accuracy"] == pytest.approx(0.65)  # one threshold
    assert _score(reply, truth, iou_threshold=0.55)["accuracy"] == pytest.approx(0.0)
    # COCO AP: a true positive at t = 0.50 only, of its ten thresholds
    assert (out["map"], out["map50"], out["map75"]) == (pytest.approx(0.1), pytest.approx(1.0), 0.0)


def test_a_box_of_the_wrong_class():
    out = _score(_reply(_boxes((CAT, "dog"))), _truth((CAT, "cat")), _row(iou_max_label_first=1.0, iou_max_iou_first=1.0, map=1.0, iou_completeness=0.3))
    assert out["iou_max_label_first"] == 0.0  # no cat box: nothing matched, nothing complete
    # max_iou_first matches the pair by IoU and then scores it 0 for the label: 0.7 x 0 + 0.3 x 1
    assert out["iou_max_iou_first"] == pytest.approx(0.3)
    assert out["map"] == 0.0  # a label the truth lacks is no detection at all
    assert out["accuracy"] == pytest.approx(0.3 / 3) and out["score"] == pytest.approx(0.1 / 1.1 + 0.1 / 1.1)


@pytest.mark.parametrize("body, fmt", [("[]", 0.0), ("no boxes here", 0.0), ("[{'bbox_2d': [5, 5, 1, 1], 'label': 'cat'}]", 0.0)])
def test_a_reply_without_usable_boxes_scores_zero(body, fmt):
    out = _score(_reply(body), _truth((CAT, "cat")))
    assert (out["score"], out["format"], out["accuracy"]) == (0.0, fmt, 0.0)


def test_format_needs_the_answer_on_its_own_lines_once():
    truth = _truth((CAT, "cat"))
    inline = _score("<answer>" + _boxes((CAT, "cat")) + "</answer>", truth)
    assert inline["format"] == 0.0 and inline["accuracy"] == pytest.approx(1.0)  # scored, but no format part
    assert inline["score"] == pytest.approx(1 / 1.1)
    twice = _reply(_boxes((CAT, "cat"))) + "\n</answer>"
    assert _score(twice, truth)["format"] == 0.0


def test_a_reply_cut_off_mid_list_keeps_its_complete_boxes():
    body = _boxes((CAT, "cat"), (DOG, "dog"))[:-30]  # cut inside the dog's item
    assert parse_boxes(body) == [((0, 0, 10, 10), "cat")]
    assert parse_boxes("[[{'bbox_2d': [0, 0, 10, 10], 'label': 'Cat'}]]".lower()) == [((0, 0, 10, 10), "cat")]
    out = _score(f"<think>.</think>\n<answer>\n{body}\n</answer>", _truth((CAT, "cat")))
    assert out["score"] == pytest.approx(1.0)


def test_multiple_boxes_an_extra_one_costs_the_size_penalty_and_completeness():
    truth = _truth((CAT, "cat"), (DOG, "dog"))
    extra = ([50, 50, 60, 60], "cat")
    out = _score(_reply(_boxes((CAT, "cat"), (DOG, "dog"), extra)), truth, _row(iou_max_label_first=1.0, map=1.0, iou_completeness=0.3))
    # both truths matched at IoU 1; 1 false alarm of 3: completeness 1 - (0 + 1/3) / 2 = 5/6
    assert out["iou_max_label_first"] == pytest.approx(0.7 + 0.3 * 5 / 6)
    assert out["size_penalty"] == pytest.approx(0.6)
    assert out["map"] == pytest.approx(1.0)  # the extra cat comes after the hit: precision 1 up to recall 1
    assert out["accuracy"] == pytest.approx(0.6 * (0.95 + 1.0) / 2)
    first = _score(_reply(_boxes(extra, (CAT, "cat"), (DOG, "dog"))), truth, _row(map=1.0))
    assert first["map"] == pytest.approx((0.5 + 1.0) / 2)  # cat: a miss then a hit, precision 0.5 at every recall


def test_max_iou_first_pairs_the_last_unmatched_boxes_as_roll_does():
    # the best IoU (cat on cat, 1.0) is recorded against the last unmatched pair (far dog, dog), as
    # ROLL's loop leaves its indices; then cat meets cat: two matches worth 1.0 each
    far_dog = ([80, 80, 90, 90], "dog")
    out = _score(_reply(_boxes((CAT, "cat"), far_dog)), _truth((CAT, "cat"), (DOG, "dog")),
                 _row(iou_max_iou_first=1.0, iou_max_label_first=1.0, iou_completeness=0.3))
    assert out["iou_max_iou_first"] == pytest.approx(1.0)
    assert out["iou_max_label_first"] == pytest.approx(0.7 * 0.5 + 0.3 * 0.5)  # label first: only the cat


def test_coco_ap_by_hand():
    assert coco_box_ap([], [((0, 0, 1, 1), "a")]) == {"map": 0.0, "map50": 0.0, "map75": 0.0}
    # two truths, one found: recall reaches 0.5 with precision 1, never 1
    ap = coco_box_ap([((0, 0, 10, 10), "a")], [((0, 0, 10, 10), "a"), ((20, 20, 30, 30), "a")])
    assert ap["map"] == pytest.approx(51 / 101)  # recall points 0.00 .. 0.50 of 101


def test_the_row_weights_and_their_checks():
    reply, truth = _reply(_boxes(([0, 0, 10, 20], "cat"))), _truth((CAT, "cat"))
    # no iou_completeness: the IoU part is the mean IoU alone, 0.5 at u = 0.5 of 11; no format part
    assert _score(reply, truth, _row(format_ratio=0.0, iou_max_label_first=1.0))["score"] == pytest.approx(0.5 / 11)
    # ratios outside [0, 1], missing or null count 0; all 0 leaves only the format part
    assert _score(reply, truth, _row(iou_max_label_first=2.0, map=None))["accuracy"] == 0.0
    assert _score(reply, truth, _row(map50=1.0))["accuracy"] == pytest.approx(1.0)
    with pytest.raises(DataError, match="extra_info_keys"):
        detection_score("coco_val", reply, truth, {})
    with pytest.raises(ConfigError, match="iou_threshold"):
        _score(reply, truth, iou_threshold="dynamic")


def test_detection_is_a_built_in_scorer_with_its_kwargs():
    fn = load_scorer("detection", {"iou_threshold": 0.5}, "reward.workers.det.worker_cls")
    out = fn("coco_val", _reply(_boxes(([0, 0, 10, 20], "cat"))), _truth((CAT, "cat")), _row(format_ratio=0.0))
    assert out["score"] == pytest.approx(0.65)


def test_a_pixel_answering_policy_s_boxes_are_rescaled_by_the_row_s_processed_image():
    # image grid (t, h, w) = (1, 40, 20) patches of 14 px: W = 280, H = 560; int(x / W x 1000)
    row = {**_row(), "image_grid_thw": [[1, 40, 20], [1, 2, 2]]}  # the first image counts
    pixels = _reply(_boxes(([0, 0, 139, 280], "cat")))  # -> [0, 0, 496, 500]
    truth = _truth(([0, 0, 500, 500], "cat"))
    # IoU 496 x 500 / 500^2 = 0.992: matched at all 11 thresholds (0.992 >= 0.99), complete
    expected = (0.7 * 0.992 + 0.3) * (1.0 / 1.1) + 0.1 / 1.1
    assert _score(pixels, truth, row, patch_size=14)["score"] == pytest.approx(expected, abs=1e-12)
    # as given (no patch size, the row's flag off, or no grid): IoU 139 x 280 / 500^2 = 0.156 < 0.5, no match
    as_given = 0.1 / 1.1  # the format alone
    assert _score(pixels, truth, row)["score"] == pytest.approx(as_given)
    off = {**row, "reward_model": {**row["reward_model"], "verifier_parm": {"det_reward_ratio": {"iou_max_label_first": 1.0}}}}
    assert _score(pixels, truth, off, patch_size=14)["score"] == pytest.approx(as_given)
    assert _score(pixels, truth, _row(), patch_size=14)["score"] == pytest.approx(as_given)
    # truncation toward zero, as ROLL's int(): 13 / 280 x 1000 = 46.4 -> 46
    assert rescale_boxes([((13, 1, 14, 2), "a")], 280, 560) == [((46, 1, 50, 3), "a")]
    with pytest.raises(ConfigError, match="patch_size: 0 is not a positive integer"):
        _score(pixels, truth, row, patch_size=0)
