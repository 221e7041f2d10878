"""ROLL's VideoR1RewardWorker becomes a `video_r1` reward worker whose rows carry their question type
(the reward_model column) in extra_info; reward_system_config is dropped as unused unless a remote
reward-system worker reads it, and refused with that worker."""

from __future__ import annotations

from posttrain.config.dialects import translate

VIDEO = "roll.pipeline.rlvr.rewards.video_r1_reward_worker.VideoR1RewardWorker"
REMOTE = "roll.pipeline.rlvr.rewards.remote_reward_system_worker.RemoteRewardSystemWorker"


def _raw(**rewards) -> dict:
    return {"pretrain": "Qwen/Qwen2.5-VL-7B-Instruct", "reward_system_config": {"skip_special_tokens": True},
            "rewards": rewards or {"videor1": {"worker_cls": VIDEO, "model_args": {"model_name_or_path": "Qwen/Qwen2.5-VL-7B-Instruct"},
                                               "tag_included": ["video"], "world_size": 2, "infer_batch_size": 1}}}


def test_a_video_r1_worker_translates_with_the_question_type_column():
    native, report = translate(_raw(), "roll")
    assert native["reward"]["workers"]["videor1"] == {"worker_cls": "video_r1", "tag_included": ["video"], "world_size": 2}
    assert native["data"]["extra_info_keys"] == ["reward_model"]
    assert native["data"]["reward_fn_key"] == "tag"
    for key in ("model_args", "infer_batch_size"):
        assert report.entry(f"rewards.videor1.{key}").status == "dropped"
    assert not report.refused


def test_reward_system_config_is_unused_without_a_remote_worker_and_refused_with_one():
    _, report = translate(_raw(), "roll")
    entry = report.entry("reward_system_config")
    assert entry.status == "dropped" and "RemoteRewardSystemWorker" in entry.reason and "unused" in entry.reason
    _, report = translate(_raw(remote={"worker_cls": REMOTE, "tag_included": ["x"]}), "roll")
    entry = report.entry("reward_system_config")
    assert entry.status == "refused" and "remote service" in entry.reason


def test_rolls_video_r1_reader_becomes_the_video_r1_prompt_format_and_columns():
    raw = _raw()
    raw["actor_train"] = {"data_args": {"custom_data_kwargs_func": "roll.datasets.vlm_dataset_utils.video_r1_get_data_kwargs",
                                        "video_fps": 2.0, "video_max_frames": 192, "video_folder": "/data/videos"}}
    native, report = translate(raw, "roll")
    data = native["data"]
    assert (data["prompt_format"], data["video_key"], data["response_key"], data["reward_fn_key"]) == ("video_r1", "video", "solution", "modality_type")
    assert data["extra_info_keys"] == ["problem_type"]  # the reader's reward_model column is the row's problem_type
    assert native["reward"]["workers"]["videor1"]["reward_kwargs"] == {"type_key": "problem_type"}
    assert (data["video_fps"], data["video_max_frames"], data["video_folder"]) == (2.0, 192, "/data/videos")
    assert not report.refused
    raw["actor_train"]["data_args"]["custom_data_kwargs_func"] = "my.module.reader"  # another reader: its Python builds the rows
    _, report = translate(raw, "roll")
    assert report.entry("actor_train.data_args.custom_data_kwargs_func").status == "refused"
