"""ROLL's model_download_type: a hub posttrain reads from its local cache, or a refusal naming the fix."""

from posttrain.config.dialects import translate


def test_hugging_face_and_directories_are_what_posttrain_does_and_modelscope_names_are_refused():
    _, report = translate({"model_download_type": "HUGGINGFACE_HUB", "pretrain": "Qwen/Qwen2.5-7B"}, "roll")
    assert report.entry("model_download_type").status == "dropped"
    _, report = translate({"model_download_type": "MODELSCOPE", "pretrain": "/models/qwen",
                           "actor_train": {"model_args": {"model_name_or_path": "/models/qwen"}}}, "roll")
    assert "every model path of the file is a directory" in report.entry("model_download_type").reason
    _, report = translate({"model_download_type": "MODELSCOPE", "pretrain": "/models/qwen", "reward_pretrain": "Qwen/Qwen3-8B"}, "roll")
    entry = report.entry("model_download_type")
    assert entry.status == "refused" and "Qwen/Qwen3-8B" in entry.reason and "modelscope" in entry.reason
    _, report = translate({"model_download_type": "S3"}, "roll")
    assert "expected MODELSCOPE or HUGGINGFACE_HUB" in report.entry("model_download_type").reason
