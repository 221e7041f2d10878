"""ROLL's async_generation_ratio: whole batches ahead become a decoupled run with that staleness bound
(posttrain.config.dialects.roll_async); a fraction of a batch is refused with ROLL's reason."""

from __future__ import annotations

import textwrap

import pytest

from posttrain.config import load_config
from posttrain.config.derive import derive
from posttrain.config.dialects import translate
from posttrain.config.plan import format_plan
from posttrain.models.tiny import make_tiny_model


@pytest.mark.parametrize(("ratio", "offset"), [(1, 1), (2, 2), (1.0, 1)])
def test_a_whole_ratio_is_that_many_batches_ahead(ratio, offset):
    native, report = translate({"async_generation_ratio": ratio}, "roll")
    assert native["synchronizer"] == {"sync_offset": offset}
    entry = report.entry("async_generation_ratio")
    assert entry.status == "translated" and entry.native == "synchronizer.sync_offset"
    assert "resumes a response cut by a weight update" in entry.reason  # the one difference, stated


@pytest.mark.parametrize("ratio", [0, 0.0, None])
def test_zero_is_the_synchronous_loop(ratio):
    native, report = translate({"async_generation_ratio": ratio}, "roll")
    assert "synchronizer" not in native and report.entry("async_generation_ratio").status == "dropped"


@pytest.mark.parametrize(("ratio", "words"), [(0.5, "fraction of a batch"), (1.5, "fraction of a batch"),
                                              (-1, "expected a number >= 0"), (True, "expected a number >= 0")])
def test_what_has_no_whole_batch_counterpart_is_refused(ratio, words):
    native, report = translate({"async_generation_ratio": ratio}, "roll")
    entry = report.entry("async_generation_ratio")
    assert "synchronizer" not in native and entry.status == "refused" and words in entry.reason


def test_a_roll_file_with_ratio_1_plans_a_decoupled_run_one_step_stale(tmp_path):
    make_tiny_model(tmp_path / "model", layers=1, hidden=16, heads=2)
    (tmp_path / "train.jsonl").write_text('{"prompt": "q", "ground_truth": "1"}\n' * 16)
    path = tmp_path / "rlvr_async.yaml"
    body = textwrap.dedent(f"""\
        pretrain: {tmp_path}/model
        rollout_batch_size: 8
        num_return_sequences_in_group: 4
        adv_estimator: grpo
        max_steps: 4
        async_generation_ratio: RATIO
        actor_train:
          training_args: {{learning_rate: 1.0e-5, per_device_train_batch_size: 2, gradient_accumulation_steps: 2}}
          data_args: {{file_name: [{tmp_path}/train.jsonl]}}
        actor_infer:
          generating_args: {{num_return_sequences: 4, max_new_tokens: 8}}
          strategy_args: {{strategy_name: hf_infer}}
        """)
    plans = {}
    for ratio in (0, 1):
        path.write_text(body.replace("RATIO", str(ratio)))
        cfg = load_config(path, dialect="roll")
        assert (cfg.trainer.mode, cfg.synchronizer.sync_interval, cfg.synchronizer.sync_offset) == ("both", 1, ratio)
        plans[ratio] = format_plan(cfg, derive(cfg, 16))
    assert "max staleness" not in plans[0]
    assert "max staleness (steps)             1   (synchronizer.sync_interval 1 - 1 + sync_offset 1: explorer and trainer processes" in plans[1]
