"""Prompt keys of the reference frameworks land where posttrain honours them: ROLL's named templates,
Trinity-RFT's enable_thinking / system_prompt / reply_prefix, verl's apply_chat_template_kwargs; and a
loaded file renders the prompt those keys describe."""

from __future__ import annotations

import textwrap

import pyarrow as pa
import pyarrow.parquet as pq

from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.data import build_rl_dataset
from posttrain.models.tiny import build_tiny_tokenizer


def _entry(report, key):
    entry = report.entry(key)
    assert entry is not None, f"{key} not in the report"
    return entry


def test_roll_template_names_and_global_template():
    native, _ = translate({"actor_train": {"data_args": {"template": "qwen3"}}}, "roll")
    assert native["data"]["chat_template_name"] == "qwen3"
    both = {"global_template": "chatml", "actor_train": {"data_args": {"template": "qwen2_5"}},
            "actor_infer": {"data_args": {"template": "qwen2_5"}}}
    native, report = translate(both, "roll")
    assert native["data"]["chat_template_name"] == "chatml"  # ROLL's pipelines read global_template first
    assert _entry(report, "actor_train.data_args.template").status == "dropped"
    assert "global_template" in _entry(report, "actor_train.data_args.template").reason
    native, report = translate({"global_template": None, "actor_train": {"data_args": {"template": "base"}}}, "roll")
    assert native["data"]["chat_template_name"] == "base" and _entry(report, "global_template").status == "dropped"
    _, report = translate({"actor_train": {"data_args": {"template": "qwen2_5"}}, "reference": {"data_args": {"template": "chatml"}}}, "roll")
    assert _entry(report, "reference.data_args.template").status == "dropped"  # ROLL reads the training role's only


def test_trinity_prompt_keys():
    raw = {
        "model": {"enable_thinking": False},
        "explorer": {"rollout_model": {"enable_thinking": False}},
        "buffer": {"explorer_input": {"taskset": {"path": "x.parquet", "format": {
            "system_prompt": "be brief", "reply_prefix": "<think>", "prompt_key": "q"}}}},
    }
    native, report = translate(raw, "trinity")
    assert native["data"]["enable_thinking"] is False
    assert (native["data"]["system_prompt"], native["data"]["reply_prefix"], native["data"]["prompt_key"]) == ("be brief", "<think>", "q")
    assert _entry(report, "explorer.rollout_model.enable_thinking").native == "data.enable_thinking"
    raw["explorer"]["rollout_model"]["enable_thinking"] = True
    _, report = translate(raw, "trinity")
    assert "conflicts with" in _entry(report, "explorer.rollout_model.enable_thinking").reason


def test_trinity_file_renders_the_prompt_it_describes(tmp_path):
    pq.write_table(pa.table({"q": ["2+2?"]}), tmp_path / "train.parquet")
    path = tmp_path / "trinity.yaml"
    path.write_text(textwrap.dedent(f"""\
        algorithm: {{algorithm_type: grpo, repeat_times: 2}}
        model: {{model_path: {tmp_path}/model, max_prompt_tokens: 256, max_response_tokens: 8}}
        buffer:
          batch_size: 1
          explorer_input:
            taskset:
              path: {tmp_path}
              split: train
              format: {{prompt_key: q, system_prompt: be brief, reply_prefix: "Let me think"}}
    """))
    cfg = load_config(path)
    ds = build_rl_dataset(cfg.data, cfg.data.train_files, build_tiny_tokenizer())
    expected = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\nLet me think"
    assert ds.encode_row(0)[2] == expected


def test_verl_apply_chat_template_kwargs_reach_the_template(tmp_path):
    pq.write_table(pa.table({"prompt": ["hi"]}), tmp_path / "train.parquet")
    path = tmp_path / "verl.yaml"
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if enable_thinking %}<think>{% endif %}"
    path.write_text(textwrap.dedent(f"""\
        data:
          train_files: {tmp_path}/train.parquet
          chat_template: "{template}"
          apply_chat_template_kwargs: {{enable_thinking: true}}
        actor_rollout_ref: {{model: {{path: {tmp_path}/model}}}}
    """))
    cfg = load_config(path)
    assert cfg.data.apply_chat_template_kwargs == {"enable_thinking": True}
    ds = build_rl_dataset(cfg.data, cfg.data.train_files, build_tiny_tokenizer())
    assert ds.encode_row(0)[2] == "hi<think>"
