"""ROLL's model_download_type: a hub posttrain reads from its local cache (Hugging Face's, or
ModelScope's for MODELSCOPE), or a refusal naming what the machine lacks."""

import importlib.util
from pathlib import Path

from posttrain.config.dialects import translate

SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "foreign_corpus.py"


def test_hugging_face_and_directories_are_what_posttrain_does():
    _, report = translate({"model_download_type": "HUGGINGFACE_HUB", "pretrain": "Qwen/Qwen2.5-7B"}, "roll")
    assert report.entry("model_download_type").status == "dropped"
    _, report = translate({"model_download_type": "MODELSCOPE", "pretrain": "/models/qwen",
                           "actor_train": {"model_args": {"model_name_or_path": "/models/qwen"}}}, "roll")
    assert "every model path of the file is a directory" in report.entry("model_download_type").reason
    _, report = translate({"model_download_type": "S3"}, "roll")
    assert "expected MODELSCOPE or HUGGINGFACE_HUB" in report.entry("model_download_type").reason


def _model(folder):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_modelscope_names_are_read_from_the_local_modelscope_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms"))
    # the modelscope library's layout: models/<org>/<name> with '.' spelled '___'; older releases: <org>/<name>
    new = _model(tmp_path / "ms" / "models" / "Qwen" / "Qwen2___5-7B")
    old = _model(tmp_path / "ms" / "Qwen" / "Qwen3-8B")
    raw = {"model_download_type": "MODELSCOPE", "pretrain": "Qwen/Qwen2.5-7B", "reward_pretrain": "Qwen/Qwen3-8B",
           "actor_train": {"model_args": {"model_name_or_path": "Qwen/Qwen2.5-7B"}}}
    native, report = translate(raw, "roll")
    assert report.entry("model_download_type").status == "dropped"
    assert native["model"]["path"] == str(new) and str(old) in report.entry("model_download_type").reason


def test_a_modelscope_name_the_cache_lacks_is_refused_as_a_missing_model(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("foreign_corpus", SWEEP)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)  # the corpus sweep's patterns of what a machine lacks (MACHINE)

    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "empty"))
    _, report = translate({"model_download_type": "MODELSCOPE", "pretrain": "/models/qwen", "reward_pretrain": "Qwen/Qwen3-8B"}, "roll")
    entry = report.entry("model_download_type")
    assert entry.status == "refused" and "'Qwen/Qwen3-8B'" in entry.reason and str(tmp_path / "empty") in entry.reason
    assert [name for name, pattern in sweep.MACHINE if pattern.search(entry.line())] == ["the model"]
