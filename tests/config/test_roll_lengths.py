"""ROLL's RLVR pipeline generates sequence_length - prompt_length tokens whatever max_new_tokens says
(its config rewrites max_new_tokens): posttrain.config.dialects.roll_lengths."""

from __future__ import annotations

import textwrap

import pytest

from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.trainer.rl_settings import sampling_params

GEN = "actor_infer.generating_args.max_new_tokens"


@pytest.mark.parametrize(("lengths", "max_new", "prompt", "budget"), [
    ({"prompt_length": 100, "sequence_length": 300, "response_length": 7}, 30, 100, 200),  # response_length reset by ROLL
    ({"prompt_length": 100, "response_length": 50}, 30, 100, 50),  # sequence_length = 50 + 100
    ({"sequence_length": 3000}, 1976, 1024, 1976),  # ROLL's prompt_length default 1024
])
def test_the_budget_is_sequence_length_minus_prompt_length(lengths, max_new, prompt, budget):
    raw = {**lengths, "actor_infer": {"generating_args": {"max_new_tokens": max_new}},
           "validation": {"generating_args": {"max_new_tokens": 5}}}
    native, report = translate(raw, "roll")
    assert native["data"]["max_prompt_length"] == prompt and native["data"]["max_response_length"] == budget
    assert "response_length" not in native.get("rollout", {})  # rollout.response_length follows data.max_response_length
    for key in (GEN, "validation.generating_args.max_new_tokens"):
        assert report.entry(key).status == "dropped"
    assert ("replaces it" in report.entry(GEN).reason) == (max_new != budget)


def test_an_agentic_files_max_new_tokens_caps_each_turn_and_sequence_length_each_episode():
    envs = {"custom_envs": {"E": {"env_type": "frozen_lake", "max_tokens_per_step": 4}}}
    native, report = translate({"train_env_manager": {"tags": ["E"]}, "response_length": 8, **envs,
                                "actor_infer": {"generating_args": {"max_new_tokens": 4}}}, "roll")
    # ROLL's managers bound the episode by sequence_length (here response_length + the default prompt_length)
    assert native["model"]["max_model_len"] == 8 + 1024 and "response_length" not in native.get("rollout", {})
    assert (native["data"]["max_prompt_length"], native["data"]["max_response_length"]) == (1031, 1031)
    assert report.entry(GEN).status == "dropped" and "E: 4" in report.entry(GEN).reason  # the env's cap is no looser
    native, looser = translate({"train_env_manager": {"tags": ["E"]}, "sequence_length": 64, **envs,
                                "actor_infer": {"generating_args": {"max_new_tokens": 2}}}, "roll")
    # E's cap of 4 is looser: both managers cap each action at 2, and E keeps 4 for its template
    assert native["env"]["train_env_manager"]["max_new_tokens"] == native["env"]["val_env_manager"]["max_new_tokens"] == 2
    assert native["env"]["custom_envs"]["E"]["max_tokens_per_step"] == 4 and "looser here: E" in looser.entry(GEN).reason


def test_a_loaded_file_samples_the_budget_roll_samples(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "q", "ground_truth": "1"}\n' * 8)
    path = tmp_path / "rlvr.yaml"
    path.write_text(textwrap.dedent(f"""\
        pretrain: {tmp_path}/model
        rollout_batch_size: 4
        prompt_length: 64
        num_gpus_per_node: 1
        sequence_length: 160
        actor_train:
          training_args: {{per_device_train_batch_size: 4, gradient_accumulation_steps: 1}}
          data_args: {{file_name: [{tmp_path}/train.jsonl]}}
        actor_infer:
          generating_args: {{num_return_sequences: 1, max_new_tokens: 16}}
        """))
    cfg = load_config(path, dialect="roll")
    train, val = sampling_params(cfg, tokenizer=None)
    assert train.max_new_tokens == val.max_new_tokens == 96  # 160 - 64, not the file's 16


def test_validation_lengths_of_their_own_give_the_validation_budget():
    raw = {"prompt_length": 100, "sequence_length": 300, "val_prompt_length": 100, "val_sequence_length": 500,
           "actor_infer": {"generating_args": {"max_new_tokens": 30}}, "validation": {"generating_args": {"max_new_tokens": 5}}}
    native, report = translate(raw, "roll")
    assert not report.refused, [e.line() for e in report.refused]
    assert native["rollout"]["val_kwargs"]["response_length"] == 400 and native["data"]["max_response_length"] == 200
    assert native["model"]["max_model_len"] == 500  # validation rows fit
    assert report.entry("validation.generating_args.max_new_tokens").status == "dropped"
    _, report = translate({**raw, "val_prompt_length": 50}, "roll")
    assert [e.key for e in report.refused] == ["val_prompt_length"]  # one prompt limit for both phases


def test_validation_lengths_outside_an_rlvr_file_are_read_by_nothing_but_must_come_together():
    """Only ROLL's RLVR config and generate scheduler read val_prompt_length / val_sequence_length; its
    base config (every pipeline's) stops when just one of them is set."""
    dpo = {"pipeline_cls": "roll.pipeline.dpo.dpo_pipeline.DPOPipeline", "val_prompt_length": 100, "val_sequence_length": 500}
    _, report = translate(dpo, "roll")
    assert {report.entry(k).status for k in ("val_prompt_length", "val_sequence_length")} == {"dropped"}
    assert "RLVR pipeline only" in report.entry("val_sequence_length").reason
    _, report = translate({"val_prompt_length": 100}, "roll")
    assert [e.key for e in report.refused] == ["val_prompt_length"] and "set together" in report.refused[0].reason
    _, report = translate({"val_prompt_length": None, "val_sequence_length": None}, "roll")
    assert not report.refused
