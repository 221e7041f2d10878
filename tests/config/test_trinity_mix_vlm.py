"""examples/mix_vlm/mix_vlm.yaml's keys: simple_mm_workflow reads no workflow_args (with_think is
dropped), the expert buffer's schema_type is SFT whatever it says (dropped), its total_epochs bounds
the steps (algorithm.mix.expert_epochs), the expert rows' image column is algorithm.mix.image_key,
and videos (or images inside a messages row) in expert rows stay refused with the reason."""

from __future__ import annotations

import json

from posttrain.config.dialects import translate

_AUX = "buffer.trainer_input.auxiliary_buffers.sft_dataset"


def _mix_vlm(tmp_path, **expert_format):
    geo, sft = tmp_path / "geo.jsonl", tmp_path / "sft.jsonl"
    geo.write_text(json.dumps({"problem": "x?", "answer": "1"}) + "\n")
    sft.write_text(json.dumps({"problem": "x?", "response": "1"}) + "\n")
    raw = {"algorithm": {"algorithm_type": "mix_chord", "repeat_times": 8, "sample_strategy_args": {"expert_data_ratio": 0.2}},
           "buffer": {"total_epochs": 4, "batch_size": 32, "train_batch_size": 320, "explorer_input": {
               "taskset": {"path": str(geo), "format": {"prompt_key": "problem", "response_key": "answer", "image_key": "images"},
                           "workflow_args": {"with_think": True}},
               "default_workflow_type": "simple_mm_workflow", "default_reward_fn_type": "math_boxed_reward"},
               "trainer_input": {"auxiliary_buffers": {"sft_dataset": {
                   "total_epochs": 25, "schema_type": "sft", "path": str(sft),
                   "format": {"prompt_type": "plaintext", "prompt_key": "problem", "response_key": "response", **expert_format}}}}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: e for e in report.entries}


def test_mix_vlm_keys_are_honoured_dropped_or_refused_with_their_reason(tmp_path):
    native, entries = _mix_vlm(tmp_path)
    assert entries["buffer.explorer_input.taskset.workflow_args.with_think"].status == "dropped"
    assert "reads no workflow_args" in entries["buffer.explorer_input.taskset.workflow_args.with_think"].reason
    assert entries[f"{_AUX}.schema_type"].status == "dropped"
    assert native["algorithm"]["mix"]["expert_epochs"] == 25
    assert not [e.line() for e in entries.values() if e.status == "refused"]
    assert "image_key" not in native["algorithm"]["mix"]  # no image column named: the data section's (data.image_key)
    native, entries = _mix_vlm(tmp_path, image_key="pictures")
    assert native["algorithm"]["mix"]["image_key"] == "pictures" and native["data"]["image_key"] == "images"
    assert entries[f"{_AUX}.format.image_key"].status == "translated"
    assert not [e.line() for e in entries.values() if e.status == "refused"]
    native, entries = _mix_vlm(tmp_path, image_key="images", video_key="videos")
    refused = entries[f"{_AUX}.format.video_key"]
    assert refused.status == "refused" and "RL prompts only" in refused.reason
    assert native["algorithm"]["mix"]["image_key"] == "images"


def test_images_of_a_messages_expert_row_stay_refused(tmp_path):
    """With prompt_type messages Trinity-RFT reads the images from the messages' own image items,
    which posttrain's rows do not carry."""
    native, entries = _mix_vlm(tmp_path, prompt_type="messages", messages_key="conv", image_key="images")
    refused = entries[f"{_AUX}.format.image_key"]
    assert refused.status == "refused" and "image items inside its messages" in refused.reason
    assert "image_key" not in native["algorithm"]["mix"]
