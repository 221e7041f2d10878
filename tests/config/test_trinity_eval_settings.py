"""Trinity-RFT evaluation tasksets with their own workflow_args / reward_fn_args (not inherited from
the training taskset): use_base and math_dapo_reward's overlong penalty become their files'
data.val_file_settings, as in examples/dapo_math/dapo.yaml."""

from __future__ import annotations

import json

import yaml

from posttrain.config.dialects import translate
from posttrain.config.dialects.prompts import BASE_MODEL_TEMPLATE
from posttrain.config.sections.data import DataConfig, ValFileConfig
from posttrain.data import build_rl_dataset
from posttrain.models.tokenizer import build_tiny_tokenizer

_IN = "buffer.explorer_input"
_SYSTEM = "Solve the following math problem step by step."
# examples/dapo_math/dapo.yaml, trimmed to its tasksets (paths: local files of the test)
DAPO = """
model: {max_response_tokens: 20480, max_model_len: 21504}
buffer:
  batch_size: 32
  explorer_input:
    taskset:
      path: TRAIN
      format: {prompt_key: prompt, response_key: solution, system_prompt: SYSTEM}
      rollout_args: {temperature: 1.0, logprobs: 0}
      workflow_args: {use_base: true}
      reward_fn_args: {enable_overlong_penalty: true, penalty_factor: 1.0, max_response_length: 20480, cache_length: 4096}
    eval_tasksets:
    - name: AIME2024
      path: EVAL
      split: train
      repeat_times: 32
      format: {prompt_key: question, response_key: answer, system_prompt: SYSTEM}
      rollout_args: {temperature: 1.0, top_p: 0.7}
    default_workflow_type: math_boxed_workflow
    default_reward_fn_type: math_dapo_reward
"""


def _dapo(tmp_path, **eval_changes):
    train, aime = tmp_path / "train.jsonl", tmp_path / "aime.jsonl"
    train.write_text(json.dumps({"prompt": "2+2?", "solution": "4"}) + "\n")
    aime.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    raw = yaml.safe_load(DAPO.replace("TRAIN", str(train)).replace("EVAL", str(aime)).replace("SYSTEM", repr(_SYSTEM)))
    raw["buffer"]["explorer_input"]["eval_tasksets"][0].update(eval_changes)
    native, report = translate(raw, "trinity")
    return native, {e.key: e for e in report.entries}, str(aime)


def test_dapo_trains_on_base_prompts_with_the_penalty_and_evaluates_chat_prompts_without(tmp_path):
    native, entries, aime = _dapo(tmp_path)
    assert not [e.line() for e in entries.values() if e.status == "refused"]
    assert native["data"]["chat_template"] == BASE_MODEL_TEMPLATE  # the training prompts: use_base
    assert native["reward"]["overlong_buffer"] == {"enable": True, "len": 4096, "penalty_factor": 1.0, "max_resp_len": 20480}
    assert native["data"]["val_file_settings"] == {aime: {"chat_template": "tokenizer", "overlong_penalty": False}}
    assert native["data"]["val_file_keys"] == {aime: {"prompt_key": "question", "response_key": "answer"}}
    # the prompts each side sends, rendered from the translated settings
    data = {k: v for k, v in native["data"].items() if k in ("chat_template", "system_prompt", "prompt_key", "response_key", "val_files", "val_file_keys")}
    settings = {k: ValFileConfig(**v) for k, v in native["data"]["val_file_settings"].items()}
    cfg = DataConfig(**data, val_file_settings=settings, return_full_prompt=True, max_prompt_length=4096)
    tokenizer = build_tiny_tokenizer()
    train = build_rl_dataset(cfg, native["data"]["train_files"], tokenizer)[0]
    val = build_rl_dataset(cfg, cfg.val_files, tokenizer, split="val")[0]
    assert train.full_prompt == f"System:{_SYSTEM}\nUser:\n2+2?\nAssistant:\n"  # Trinity's format_prompt
    assert val.full_prompt == f"<|im_start|>system\n{_SYSTEM}<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"


def test_an_evaluation_taskset_like_the_training_one_needs_no_settings(tmp_path):
    args = {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 20480, "cache_length": 4096}
    native, entries, _ = _dapo(tmp_path, workflow_args={"use_base": True}, reward_fn_args=args)
    assert "val_file_settings" not in native["data"]
    assert entries[f"{_IN}.eval_tasksets[0].workflow_args.use_base"].status == "dropped"
    assert entries[f"{_IN}.eval_tasksets[0].reward_fn_args"].status == "dropped"


def test_a_penalty_on_in_evaluation_only_sets_the_ramp_for_its_files(tmp_path):
    args = {"enable_overlong_penalty": True, "penalty_factor": 0.5, "max_response_length": 20480, "cache_length": 2048}
    raw_train_off = {"enable_overlong_penalty": False}
    train, aime = tmp_path / "train.jsonl", tmp_path / "aime.jsonl"
    for p in (train, aime):
        p.write_text("{}\n")
    raw = {"model": {"max_response_tokens": 20480}, "buffer": {"explorer_input": {
        "default_reward_fn_type": "math_dapo_reward",
        "taskset": {"path": str(train), "reward_fn_args": raw_train_off},
        "eval_tasksets": [{"path": str(aime), "reward_fn_args": args}]}}}
    native, report = translate(raw, "trinity")
    assert not [e.line() for e in report.entries if e.status == "refused"]
    assert native["reward"]["overlong_buffer"] == {"len": 2048, "penalty_factor": 0.5, "max_resp_len": 20480}  # enable: off
    assert native["data"]["val_file_settings"] == {str(aime): {"overlong_penalty": True}}


def test_penalties_posttrain_cannot_give_are_refused(tmp_path):
    # one ramp: an evaluation penalty with another cache_length than the training one
    other = {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 20480, "cache_length": 1024}
    native, entries, _ = _dapo(tmp_path, reward_fn_args=other)
    assert entries[f"{_IN}.eval_tasksets[0].reward_fn_args"].status == "refused"
    assert "one ramp" in entries[f"{_IN}.eval_tasksets[0].reward_fn_args"].reason
    # a bad evaluation penalty is refused as a bad training one is
    native, entries, _ = _dapo(tmp_path, reward_fn_args={**other, "cache_length": 30000})
    assert entries[f"{_IN}.eval_tasksets[0].reward_fn_args"].status == "refused"
    # an evaluation taskset whose files are not known (its path refused): its difference stays refused
    native, entries, _ = _dapo(tmp_path, path="no/such/file.jsonl")
    assert entries[f"{_IN}.eval_tasksets[0].path"].status == "refused"
    assert "differs" in entries[f"{_IN}.default_workflow_type"].reason
