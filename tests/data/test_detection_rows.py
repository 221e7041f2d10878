"""Rows in ROLL's vision RLVR layout (One-RL-to-See-Them-All's reward_model object) reach a routed
`detection` worker: data.extra_info_keys copies the row's reward_model into extra_info, and the
router scores the detection tag with the row's own weights."""

from __future__ import annotations

import pytest
from data_helpers import write_rows

from posttrain.config import load_config
from posttrain.data import build_rl_dataset
from posttrain.rewards import RewardInput
from posttrain.trainer.rewarding import build_router, reward_function

TRUTH = "<answer>\n[{'bbox_2d': [0, 0, 10, 10], 'label': 'cat'}]\n</answer>"
REPLY = "<think>a cat</think>\n<answer>\n[{'bbox_2d': [0, 0, 10, 20], 'label': 'cat'}]\n</answer>"
NULL_RATIOS = dict.fromkeys(["iou_max_label_first", "iou_max_iou_first", "iou_completeness", "map", "map50", "map75"])


def test_detection_rows_flow_to_the_detection_worker_with_their_weights(tmp_path, tokenizer):
    ratios = {**NULL_RATIOS, "iou_max_label_first": 1.0, "iou_max_iou_first": 0.0, "iou_completeness": 0.3, "map": 0.0, "map50": 0.0, "map75": 0.0}
    path = write_rows(tmp_path / "rows.parquet", [
        {"data_source": "v3det_train", "prompt": [{"role": "user", "content": "Find the cat."}],
         "reward_model": {"ground_truth": TRUTH, "accuracy_ratio": 1.0, "format_ratio": 0.5,
                          "verifier_parm": {"det_verifier_normalized": True, "det_reward_ratio": ratios}}},
        {"data_source": "mm_math", "prompt": [{"role": "user", "content": "1+1? A) 3 B) 2"}],
         "reward_model": {"ground_truth": "B", "accuracy_ratio": 1.0, "format_ratio": 0.0,
                          "verifier_parm": {"det_verifier_normalized": None, "det_reward_ratio": NULL_RATIOS}}},
    ])
    cfg = load_config(None, ["data.extra_info_keys=[reward_model]", "data.messages_key=prompt",
                             "reward.workers.det.worker_cls=detection", "reward.workers.det.tag_included=[v3det_train]",
                             "reward.workers.quiz.worker_cls=multiple_choice", "reward.workers.quiz.tag_included=[mm_math]"])
    rows = build_rl_dataset(cfg.data, path, tokenizer)
    assert rows[0].extra_info["reward_model"]["format_ratio"] == 0.5
    router = build_router(cfg, reward_function(cfg))
    samples = [RewardInput(r.data_source, text, r.ground_truth, r.extra_info, index=i)
               for i, (r, text) in enumerate(zip(rows, [REPLY, "\\boxed{B}"]))]
    out = router.score(samples)
    # IoU 0.5, matched at u = 0.5 of 11: (0.7 x 0.5 + 0.3) / 11; weighted 1 : 0.5 with the format part 1
    assert out.scores[0] == pytest.approx((0.65 / 11) / 1.5 + 0.5 / 1.5)
    assert out.scores[1] == 1.0 and out.workers["det"].count == 1
    assert out.extra["format"][0] == 1.0 and out.extra["map50"][0] == pytest.approx(1.0)  # the parts, logged as reward/<part>
