"""Trinity-RFT's buffer.batch_size (tasks per explore step) and buffer.train_batch_size (experiences
per trainer step, default batch_size x repeat_times) land on posttrain's step of one explored batch,
or are refused where Trinity-RFT's trainer and explorer would step at different rates
(Trinity-RFT: trinity/common/config_validator.py, trinity/trainer/verl/verl_config.py)."""

from __future__ import annotations

from posttrain.config.dialects import translate


def run(buffer: dict, mode: str = "both", algorithm_type: str = "grpo", repeat: int = 8, **extra):
    raw = {"mode": mode, "algorithm": {"algorithm_type": algorithm_type, "repeat_times": repeat}, "buffer": buffer, **extra}
    native, report = translate(raw, "trinity")
    return native, report


def _at(native: dict, key: str):
    node = native
    for part in key.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node if node != {} else None


def test_mode_both_one_trainer_step_is_one_explored_batch():
    native, report = run({"batch_size": 32, "train_batch_size": 256})  # 32 tasks x 8 = 256 experiences
    assert (_at(native, "data.train_batch_size"), _at(native, "actor.ppo_mini_batch_size")) == (32, 32)
    assert report.entry("buffer.train_batch_size").status == "translated"
    native, _ = run({"batch_size": 32})  # the default: batch_size x repeat_times
    assert (_at(native, "data.train_batch_size"), _at(native, "actor.ppo_mini_batch_size")) == (32, 32)
    native, report = run({})  # Trinity-RFT's batch_size defaults to 1 task, posttrain's to 8 prompts
    assert (_at(native, "data.train_batch_size"), _at(native, "actor.ppo_mini_batch_size")) == (1, 1)


def test_mode_both_with_another_trainer_step_is_refused_naming_the_batch_size_that_fits():
    for experiences in (1024, 128):  # a trainer step over 4 explore steps, or over half of one
        _, report = run({"batch_size": 32, "train_batch_size": experiences})
        entry = report.entry("buffer.train_batch_size")
        assert entry.status == "refused" and "exactly one explored batch" in entry.reason
        assert f"set buffer.batch_size to {experiences // 8}" in entry.reason
    _, report = run({"batch_size": 32, "train_batch_size": 260})  # not whole prompts
    assert report.entry("buffer.train_batch_size").status == "refused"


def test_the_mix_types_expert_rows_are_part_of_the_trainer_step():
    # expert_data_ratio 0.2 of 320: 64 expert rows, 256 explored = 32 x 8
    extra = {"algorithm": {"algorithm_type": "mix", "repeat_times": 8, "sample_strategy_args": {"expert_data_ratio": 0.2}}}
    buffer = {"batch_size": 32, "train_batch_size": 320,
              "trainer_input": {"auxiliary_buffers": {"sft_dataset": {"path": "/nonexistent/sft"}}}}
    native, report = translate({**extra, "buffer": buffer}, "trinity")
    assert _at(native, "actor.ppo_mini_batch_size") == 32  # though the expert file is missing here
    assert report.entry("buffer.train_batch_size").status == "translated"


def test_mode_train_reads_stored_batches_of_train_batch_size_over_repeat_times():
    native, report = run({"train_batch_size": 768, "batch_size": 4}, mode="train")
    assert (_at(native, "data.train_batch_size"), _at(native, "actor.ppo_mini_batch_size")) == (96, 96)
    assert report.entry("buffer.batch_size").status == "dropped"  # the explorer's, which mode train does not run


def test_explore_mode_multi_step_and_sft_dpo():
    native, report = run({"batch_size": 96, "train_batch_size": 512}, mode="explore")
    assert report.entry("buffer.train_batch_size").status == "dropped" and _at(native, "data.train_batch_size") == 96
    _, report = run({"batch_size": 16, "train_batch_size": 512}, mode="train", algorithm_type="multi_step_grpo")
    entry = report.entry("buffer.train_batch_size")
    assert entry.status == "refused" and "a trainer step of so many turns" in entry.reason
    for kind in ("sft", "dpo"):
        native, _ = run({"train_batch_size": 64}, mode="train", algorithm_type=kind, repeat=1)
        assert _at(native, "data.train_batch_size") == 64  # sequences (pairs) per step


def test_multi_step_grpo_trains_turn_rows_in_mini_batches_of_train_batch_size_turns():
    # Trinity-RFT: 16 tasks x 8 runs explored per step, its trainer takes 512 experiences (turns) per optimizer step
    native, report = run({"batch_size": 16, "train_batch_size": 512}, algorithm_type="multi_step_grpo")
    assert (_at(native, "env.train_rows"), _at(native, "env.turn_mini_batch_size")) == ("turn", 512)
    assert (_at(native, "data.train_batch_size"), _at(native, "actor.ppo_mini_batch_size")) == (16, 16)
    assert report.entry("buffer.train_batch_size").status == "translated"
    native, _ = run({"batch_size": 16}, algorithm_type="multi_step_grpo")  # the default: batch_size x repeat_times turns
    assert (_at(native, "env.train_rows"), _at(native, "env.turn_mini_batch_size")) == ("turn", 128)
    native, _ = run({"batch_size": 16, "train_batch_size": 512})  # grpo: rows are responses, the old rule refuses
    assert _at(native, "env.train_rows") is None
