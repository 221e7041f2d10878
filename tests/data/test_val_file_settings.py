"""data.val_file_settings: a validation entry prompted with its own chat template and scored with or
without the overlong penalty, beside entries that follow the training settings."""

from __future__ import annotations

import pytest
import torch
from data_helpers import write_rows

from posttrain.config import load_config
from posttrain.config.dialects.prompts import BASE_MODEL_TEMPLATE
from posttrain.config.sections.data import DataConfig, ValFileConfig
from posttrain.data import build_rl_dataset
from posttrain.errors import ConfigError
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.trainer.rewarding import RewardStage, val_overlong_rows
from worker_helpers import answer_batch


def _val(tmp_path, tokenizer, settings, **cfg):
    chat = write_rows(tmp_path / "aime.jsonl", [{"prompt": "1+1?", "response": "2"}])
    plain = write_rows(tmp_path / "plain.jsonl", [{"prompt": "2+2?", "response": "4"}])
    data = DataConfig(val_files=[chat, plain], val_file_settings={chat: settings}, return_full_prompt=True,
                      max_prompt_length=4096, system_prompt="Be brief.", **cfg)
    return build_rl_dataset(data, data.val_files, tokenizer, split="val")


def test_an_entry_is_prompted_with_its_own_template(tmp_path, tokenizer):
    # training prompts a base model in plain text (Trinity's use_base); the benchmark is a chat model's
    ds = _val(tmp_path, tokenizer, ValFileConfig(chat_template="tokenizer"), chat_template=BASE_MODEL_TEMPLATE)
    assert ds[0].full_prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
    assert ds[1].full_prompt == "System:Be brief.\nUser:\n2+2?\nAssistant:\n"  # the other entry: the stage's template
    # and the other way round: an inline template for one entry, the tokenizer's for the stage
    ds = _val(tmp_path, tokenizer, ValFileConfig(chat_template=BASE_MODEL_TEMPLATE))
    assert ds[0].full_prompt == "System:Be brief.\nUser:\n1+1?\nAssistant:\n"
    assert ds[1].full_prompt.startswith("<|im_start|>system\nBe brief.")
    assert len(ds[0].prompt_ids) == len(ds[0].full_prompt)  # the ids are the entry's rendering (one per character)


def test_a_bad_entry_template_names_its_setting(tmp_path, tokenizer):
    with pytest.raises(ConfigError, match=r"data.val_file_settings\..*aime.jsonl.chat_template: .*file not found: nope.jinja"):
        _val(tmp_path, tokenizer, ValFileConfig(chat_template="nope.jinja"))


def _by_length(data_source, solution_str, ground_truth, extra_info=None):
    return len(solution_str) / 10


@pytest.mark.parametrize("training_on", [True, False])
def test_an_entry_is_scored_with_its_own_overlong_penalty(tmp_path, training_on):
    tokenizer = build_tiny_tokenizer()
    chat = write_rows(tmp_path / "aime.jsonl", [{"prompt": "1+1?"}])
    plain = write_rows(tmp_path / "plain.jsonl", [{"prompt": "2+2?"}])
    own = not training_on  # the entry's setting is the opposite of the training scores'
    cfg = load_config(None, [f"reward.overlong_buffer.enable={str(training_on).lower()}", "reward.overlong_buffer.len=4",
                             "data.max_response_length=6", f"data.val_files=[{chat},{plain}]",
                             f"data.val_file_settings={{{chat}: {{overlong_penalty: {str(own).lower()}}}}}"])
    stage = RewardStage(cfg, tokenizer, _by_length)
    val_set = build_rl_dataset(cfg.data, cfg.data.val_files, tokenizer, split="val")
    # two responses per prompt; "12345" is 6 tokens with its eos: at the budget, the full penalty -1
    batch = answer_batch(tokenizer, ["12345", "1", "12345", "1"], ["val-0", "val-0", "val-1", "val-1"], data_source="s")
    rows = val_overlong_rows(val_set, batch.group_index, {"val-0": 0, "val-1": 1}, cfg)
    assert rows == [own, own, training_on, training_on]
    scores, _, _ = stage.score(batch, stage.decode(batch), overlong_rows=rows)
    plain_scores = [1.5, 1.1]  # len("12345<|im_end|>") / 10, len("1<|im_end|>") / 10 (the 2-token one: no penalty)
    penalised = [1.5 - 1.0, 1.1]
    expected = (plain_scores if not own else penalised) + (penalised if training_on else plain_scores)
    torch.testing.assert_close(scores, torch.tensor(expected))
    # without entry settings every row follows reward.overlong_buffer.enable, as before
    assert val_overlong_rows(build_rl_dataset(cfg.data, [plain], tokenizer, split="val"), ["val-0"], {"val-0": 0}, cfg) is None
    stage.close()


def test_bad_val_file_settings_are_refused_when_the_config_loads(tmp_path):
    def problems(*overrides):
        with pytest.raises(ConfigError) as err:
            load_config(None, list(overrides))
        return str(err.value)

    assert "'b.jsonl' is not an entry of data.val_files" in problems("data.val_files=[a.jsonl]", "data.val_file_settings={b.jsonl: {overlong_penalty: false}}")
    assert "reward.overlong_buffer.len" in problems("data.val_files=[a.jsonl]", "data.val_file_settings={a.jsonl: {overlong_penalty: true}}")
    assert "algorithm.kind=sft" in problems("algorithm.kind=sft", "data.val_files=[a.jsonl]", "data.val_file_settings={a.jsonl: {chat_template: tokenizer}}")
    assert "writes its own template" in problems("data.chat_template_name=chatml", "data.val_files=[a.jsonl]",
                                                 "data.val_file_settings={a.jsonl: {chat_template: tokenizer}}")
    assert "unknown" in problems("data.val_files=[a.jsonl]", "data.val_file_settings={a.jsonl: {use_base: true}}").lower()
