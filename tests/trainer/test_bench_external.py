"""`rollout.name: external` in `trainer.mode: bench`: an OpenAI-compatible endpoint benched with the
stage's validation data and reward (Trinity-RFT's `model.external_model`)."""

from __future__ import annotations

import csv
import json
import threading

import pytest

from posttrain.config.load import load_config
from posttrain.cli import main
from posttrain.errors import ConfigError, UserError
from posttrain.models.loading import load_causal_lm, load_tokenizer
from posttrain.rollout.hf_engine import HFEngine
from posttrain.rollout.server import ChatService, make_server
from posttrain.trainer.run import run
from rl_helpers import BASE, tiny_rl_files


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The tiny model behind posttrain's own chat endpoint on a free port, and the run's overrides."""
    root, model = tiny_rl_files(tmp_path_factory.mktemp("external"))
    tokenizer = load_tokenizer(str(model))
    engine = HFEngine(load_causal_lm(str(model), dtype="fp32").eval().requires_grad_(False),
                      pad_token_id=tokenizer.pad_token_id, copy_weights=False, tokenizer=tokenizer)
    server = make_server(ChatService(engine, tokenizer, "tiny"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    overrides = [f"model.path={model}", f"data.train_files={root}/data/train.parquet", f"data.val_files={root}/data/test.parquet",
                 *BASE, "data.return_raw_chat=true", "trainer.logger=[jsonl]", "trainer.log_val_generations=4"]
    yield root, overrides, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _external(root, overrides, name="bench_ext"):
    return [*overrides, "trainer.mode=bench", "rollout.name=external", "rollout.external.model_name=tiny",
            "rollout.external.base_url_env=TEST_EXT_URL", "rollout.external.api_key_env=TEST_EXT_API_KEY",
            f"trainer.default_local_dir={root}/{name}"]


def _generations(path):
    return [(r["prompt"], r["response"], r["score"]) for r in map(json.loads, path.read_text().splitlines())]


def test_bench_of_the_endpoint_scores_what_the_local_engine_scores(served, monkeypatch):
    root, overrides, url = served
    # the same model validated greedily by posttrain's own engine, before any training
    [local] = run(load_config(None, [*overrides, "trainer.val_only=true", f"trainer.default_local_dir={root}/local"]))
    monkeypatch.setenv("TEST_EXT_URL", url)
    monkeypatch.setenv("TEST_EXT_API_KEY", "secret")
    [result] = run(load_config(None, _external(root, overrides)))
    rows = list(csv.DictReader((root / "bench_ext" / "bench" / "bench.csv").open()))
    assert [r["step"] for r in rows] == ["0"]
    scores = [k for k in local.last_metrics if k.startswith("val/")]
    assert scores and all(result.last_metrics[k] == pytest.approx(local.last_metrics[k], abs=1e-6) for k in scores)
    ours = _generations(root / "bench_ext" / "bench" / "val_generations.jsonl")
    theirs = _generations(root / "local" / "val_generations.jsonl")
    assert len(ours) == 4 and sorted(ours) == sorted(theirs)  # the same greedy responses, the same scores
    assert "| step |" in (root / "bench_ext" / "bench" / "bench.md").read_text()


def test_a_missing_environment_variable_is_one_line_naming_it(served, monkeypatch):
    root, overrides, url = served
    monkeypatch.delenv("TEST_EXT_URL", raising=False)
    monkeypatch.setenv("TEST_EXT_API_KEY", "secret")
    with pytest.raises(UserError, match="environment variable TEST_EXT_URL is not set"):
        run(load_config(None, _external(root, overrides)))
    monkeypatch.setenv("TEST_EXT_URL", url)
    monkeypatch.delenv("TEST_EXT_API_KEY")
    with pytest.raises(UserError, match=r"environment variable TEST_EXT_API_KEY is not set \(rollout.external.api_key_env"):
        run(load_config(None, _external(root, overrides)))


def test_an_unreachable_endpoint_is_one_line_naming_the_url(served, monkeypatch):
    root, overrides, _ = served
    monkeypatch.setenv("TEST_EXT_URL", "http://127.0.0.1:9/v1")  # the discard port: nothing listens
    monkeypatch.setenv("TEST_EXT_API_KEY", "secret")
    with pytest.raises(UserError, match=r"external model at http://127.0.0.1:9/v1/chat/completions: .*after 3 tries"):
        run(load_config(None, [*_external(root, overrides), "rollout.external.max_retries=2"]))


def test_an_http_error_names_the_url_and_is_not_retried(served, monkeypatch):
    root, overrides, url = served
    monkeypatch.setenv("TEST_EXT_URL", url.replace("/v1", "/nope"))
    monkeypatch.setenv("TEST_EXT_API_KEY", "secret")
    with pytest.raises(UserError, match=r"external model at http://127.0.0.1:\d+/nope/chat/completions: HTTP 404"):
        run(load_config(None, _external(root, overrides)))


@pytest.mark.parametrize("mode", ["both", "explore", "train"])
def test_modes_that_train_or_fill_a_buffer_refuse_it(served, mode):
    root, overrides, _ = served
    with pytest.raises(UserError, match=f"rollout.name=external with trainer.mode={mode}: .*weights cannot be synced"):
        load_config(None, [*_external(root, overrides), f"trainer.mode={mode}"])


def test_raw_chat_and_model_name_are_required(served):
    root, overrides, _ = served
    with pytest.raises(UserError, match="set data.return_raw_chat: true"):
        load_config(None, [*_external(root, overrides), "data.return_raw_chat=false"])
    with pytest.raises(UserError, match="rollout.external.model_name: the model id"):
        load_config(None, [*_external(root, overrides), "rollout.external.model_name=''"])


def test_sampling_a_request_cannot_carry_is_refused(served):
    root, overrides, _ = served
    with pytest.raises(UserError, match="rollout.val_kwargs.top_k: an OpenAI chat-completions request has no such field"):
        load_config(None, [*_external(root, overrides), "rollout.val_kwargs.top_k=5"])


def test_the_request_carries_the_validation_sampling():
    from posttrain.rollout.base import SamplingParams
    from posttrain.rollout.external_engine import request_body

    messages = [{"role": "user", "content": "hi"}]
    greedy = request_body("m", messages, SamplingParams(do_sample=False, max_new_tokens=7))
    assert greedy == {"model": "m", "messages": messages, "n": 1, "max_tokens": 7, "temperature": 0.0}
    sampled = request_body("m", messages, SamplingParams(temperature=0.7, top_p=0.9, n=3, max_new_tokens=5, stop=("</a>",), seed=4))
    assert sampled == {"model": "m", "messages": messages, "n": 3, "max_tokens": 5, "temperature": 0.7, "top_p": 0.9,
                       "stop": ["</a>"], "seed": 4}


def test_a_bench_file_without_training_rows_evaluates_its_validation_rows(served, monkeypatch, capsys):
    """Trinity-RFT's bench files name eval_tasksets only: no data.train_files is needed to plan or run them."""
    root, overrides, url = served
    monkeypatch.setenv("TEST_EXT_URL", url)
    monkeypatch.setenv("TEST_EXT_API_KEY", "secret")
    [with_rows] = run(load_config(None, _external(root, overrides, "bench_with_rows")))
    val_only = _external(root, [o for o in overrides if not o.startswith("data.train_files=")], "bench_val_only")
    assert main(["config", "plan", *val_only]) == 0
    assert "trainer.mode bench evaluates the 4 rows of data.val_files and reads no training rows" in capsys.readouterr().out
    [result] = run(load_config(None, val_only))
    scores = [k for k in with_rows.last_metrics if k.startswith("val/")]
    assert scores and all(result.last_metrics[k] == pytest.approx(with_rows.last_metrics[k], abs=1e-6) for k in scores)
    no_val = [o for o in val_only if not o.startswith("data.val_files=")]
    with pytest.raises(ConfigError, match="trainer.mode=bench evaluates an RL stage's checkpoints on data.val_files"):
        run(load_config(None, no_val))
