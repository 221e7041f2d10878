"""The arithmetic task's `partial_credit` option travels with the rows and changes only the reward."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from posttrain.errors import ConfigError
from posttrain.tasks import compute_score, write_task_data


def _rows(tmp_path, **options):
    paths = write_task_data("arithmetic", tmp_path, train=10, test=5, sft=0, dpo=0, seed=3, options=options)
    return pq.read_table(paths["test"]).to_pylist()


def test_rows_carry_the_option_and_the_scorer_uses_it(tmp_path):
    plain, partial = _rows(tmp_path / "a"), _rows(tmp_path / "b", partial_credit=0.5)
    assert [r["prompt"] for r in plain] == [r["prompt"] for r in partial]  # same problems either way
    row = partial[0]
    truth = row["reward_model"]["ground_truth"]
    wrong_last_digit = truth[:-1] + str((int(truth[-1]) + 1) % 10)
    n = len(truth)
    assert compute_score(row["data_source"], wrong_last_digit, truth, row["extra_info"]) == {
        "score": pytest.approx(0.5 * (n - 1) / n), "acc": 0.0}
    assert compute_score(row["data_source"], truth + "<|im_end|>", truth, row["extra_info"]) == {"score": 1.0, "acc": 1.0}
    assert compute_score(row["data_source"], wrong_last_digit, truth, plain[0]["extra_info"]) == {"score": 0.0, "acc": 0.0}


def test_partial_credit_is_aligned_by_place_value():
    info = {"options": '{"partial_credit": 0.8}'}
    assert compute_score("posttrain/arithmetic", "154", "154", info)["score"] == 1.0
    assert compute_score("posttrain/arithmetic", "54", "154", info)["score"] == pytest.approx(0.8 * 2 / 3)
    assert compute_score("posttrain/arithmetic", "1540", "154", info)["score"] == 0.0  # nothing in place
    assert compute_score("posttrain/arithmetic", "", "154", info)["score"] == 0.0


@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_partial_credit_must_stay_below_a_right_answer(tmp_path, value):
    with pytest.raises(ConfigError, match=r"--partial-credit must be in \[0, 1\)"):
        _rows(tmp_path, partial_credit=value)
