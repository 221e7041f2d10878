"""Trinity-RFT's `model.external_model`: translated onto rollout.name=external (posttrain.rollout.external_engine)."""

from __future__ import annotations

import pytest
import yaml

from posttrain.config.dialects import translate
from posttrain.config.load import load_config
from posttrain.errors import UserError

# the shape of Trinity-RFT's examples/bench/external_model.yaml
EXAMPLE = """
mode: bench
model:
  model_path: qwen3-max
  max_model_len: 4096
  max_prompt_tokens: 2048
  max_response_tokens: 1024
  external_model: {enable: true, model_name: qwen3-max, base_url_env: OPENAI_BASE_URL, api_key_env: OPENAI_API_KEY}
buffer:
  batch_size: 16
  total_epochs: 1
  explorer_input:
    eval_tasksets:
      - {name: gsm8k_eval, storage_type: file, path: org/dataset, split: test, repeat_times: 1,
         format: {prompt_key: question, response_key: answer}, rollout_args: {temperature: 1.0, logprobs: 0}}
    default_eval_workflow_type: math_workflow
"""


def _report(raw: dict) -> dict:
    return {e.key: (e.status, e.native, e.value) for e in translate(raw, "trinity")[1].entries if e.key.startswith("model.external_model")}


def test_an_enabled_external_model_becomes_the_external_engine():
    raw = {"mode": "bench", "model": {"model_path": "/m", "external_model": {
        "enable": True, "model_name": "qwen3-max", "base_url_env": "MY_URL", "api_key_env": "MY_API_KEY"}}}
    native = translate(raw, "trinity")[0]
    assert native["rollout"]["name"] == "external" and native["data"]["return_raw_chat"] is True
    assert native["rollout"]["external"] == {"model_name": "qwen3-max", "base_url_env": "MY_URL", "api_key_env": "MY_API_KEY"}
    assert {k: v[0] for k, v in _report(raw).items()} == {k: "translated" for k in (
        "model.external_model.enable", "model.external_model.model_name", "model.external_model.base_url_env",
        "model.external_model.api_key_env")}


def test_a_disabled_one_is_dropped_and_an_unknown_field_refused():
    off = {"model": {"model_path": "/m", "external_model": {"enable": False, "model_name": "x"}}}
    assert translate(off, "trinity")[0]["rollout"]["name"] == "vllm"  # Trinity-RFT's own engine samples from model_path
    assert {v[0] for v in _report(off).values()} == {"dropped"}
    odd = {"mode": "bench", "model": {"model_path": "/m", "external_model": {"enable": True, "model_name": "x", "logprobs": 1}}}
    assert _report(odd)["model.external_model.logprobs"][0] == "refused"


def test_the_example_file_loads_as_a_bench_of_the_endpoint(tmp_path):
    raw = yaml.safe_load(EXAMPLE)
    native = translate(raw, "trinity")[0]
    assert native["trainer"]["mode"] == "bench" and native["rollout"]["name"] == "external"
    assert native["rollout"]["external"] == {"model_name": "qwen3-max", "base_url_env": "OPENAI_BASE_URL", "api_key_env": "OPENAI_API_KEY"}
    refused = [e for e in translate(raw, "trinity")[1].entries if e.status == "refused" and e.key.startswith("model.")]
    assert refused == []


def test_another_mode_is_refused_once_loaded(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump({"mode": "both", "model": {"model_path": str(tmp_path), "external_model": {"enable": True, "model_name": "m"}}}))
    with pytest.raises(UserError, match="rollout.name=external with trainer.mode=both: .*cannot be synced"):
        load_config(str(path), [])
