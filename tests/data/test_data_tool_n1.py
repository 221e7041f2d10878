"""data.prompt_format tool_n1: a Tool-N1 row's prompt is the system text plus Tool-N1's tool
instructions, then its conversation turns (as Trinity-RFT's toolcall_workflow builds it)."""

from __future__ import annotations

import json

import pytest
from data_helpers import write_rows

from posttrain.config.sections.data import DataConfig
from posttrain.data import build_rl_dataset
from posttrain.data.tool_n1 import TOOL_INSTRUCTIONS
from posttrain.errors import DataError

TEMPLATE = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
ROW = {"raw_system": "Be useful.", "tools": json.dumps([{"name": "email"}]), "answer": "[]",
       "conversations": [{"from": "human", "value": "mail Bob"}, {"from": "function_call", "value": "[x]"},
                         {"from": "observation", "value": "ok"}, {"from": "gpt", "value": "done"}, {"from": "note", "value": "skipped"}]}


def _prompt(tmp_path, tokenizer, row, **cfg) -> str:
    path = write_rows(tmp_path / "t.jsonl", [row])
    data = DataConfig(prompt_format="tool_n1", chat_template=TEMPLATE, return_full_prompt=True, max_prompt_length=8192, **cfg)
    return build_rl_dataset(data, path, tokenizer)[0].full_prompt


def test_a_tool_n1_row_becomes_its_conversation(tmp_path, tokenizer):
    system = "Be useful." + TOOL_INSTRUCTIONS.format(tools='{"type": "function", "function": {"name": "email"}}')
    want = f'[system]{system}[user]mail Bob[assistant]"[x]"[tool]ok[assistant]done'
    assert _prompt(tmp_path, tokenizer, ROW) == want
    assert _prompt(tmp_path, tokenizer, {**ROW, "tools": [{"name": "email"}]}) == want  # schemas as a list too
    assert _prompt(tmp_path, tokenizer, ROW, system_prompt="ignored") == want  # the row's own system message wins


def test_a_tool_n1_row_without_its_columns_is_named(tmp_path, tokenizer):
    with pytest.raises(DataError, match="no column 'conversations'"):
        _prompt(tmp_path, tokenizer, {"raw_system": "s", "tools": "[]"})
    with pytest.raises(DataError, match="column 'tools'"):
        _prompt(tmp_path, tokenizer, {**ROW, "tools": "{not json"})


def test_user_suffix_follows_every_user_message(tmp_path, tokenizer):
    path = write_rows(tmp_path / "q.jsonl", [{"prompt": "2+2?"}])
    data = DataConfig(chat_template=TEMPLATE, return_full_prompt=True, system_prompt="Be brief.", user_suffix="\nBox it.")
    assert build_rl_dataset(data, path, tokenizer)[0].full_prompt == "[system]Be brief.[user]2+2?\nBox it."
