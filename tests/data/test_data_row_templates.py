"""Per-row templating: data.tools_key (each row's tool schemas reach the chat template as `tools`)
and data.tag_to_template (a named template per row tag, the rest on data.chat_template_name)."""

import copy

import pytest
from data_helpers import write_rows

from posttrain.config import load_config
from posttrain.config.sections.data import DataConfig
from posttrain.data import build_rl_dataset, build_sft_dataset
from posttrain.errors import ConfigError, DataError

# A template that shows the tools it was given, then the prompt.
TOOLS = ("{% if tools %}[{% for t in tools %}{{ t['name'] }};{% endfor %}]{% endif %}"
         "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }};{% endfor %}{% if add_generation_prompt %}a:{% endif %}")
CALC = {"name": "calc", "parameters": {"type": "object"}}
CLOCK = {"name": "clock"}


def _prompts(tmp_path, tokenizer, rows, **cfg) -> list[str]:
    path = write_rows(tmp_path / "t.jsonl", rows)
    data = DataConfig(return_full_prompt=True, max_prompt_length=2048, **cfg)
    dataset = build_rl_dataset(data, path, tokenizer)
    return [dataset[k].full_prompt for k in range(len(dataset))]


def test_each_rows_tools_reach_the_chat_template(tmp_path, tokenizer):
    rows = [{"prompt": "a", "tools": [CALC, CLOCK]}, {"prompt": "b", "tools": '[{"name": "clock"}]'},
            {"prompt": "c", "tools": None}, {"prompt": "d"}]
    assert _prompts(tmp_path, tokenizer, rows, chat_template=TOOLS, tools_key="tools") == [
        "[calc;clock;]u:a;a:", "[clock;]u:b;a:", "u:c;a:", "u:d;a:"]
    assert _prompts(tmp_path, tokenizer, rows, chat_template=TOOLS) == ["u:a;a:", "u:b;a:", "u:c;a:", "u:d;a:"]  # unset: no tools
    sft = write_rows(tmp_path / "s.jsonl", [{"prompt": "a", "response": "r", "tools": [CALC]}])
    with_tools = build_sft_dataset(DataConfig(chat_template=TOOLS, tools_key="tools"), sft, tokenizer)[0]
    assert len(with_tools.input_ids) == len(build_sft_dataset(DataConfig(chat_template=TOOLS), sft, tokenizer)[0].input_ids) + len("[calc;]")


def test_bad_tool_cells_and_a_missing_column_are_refused(tmp_path, tokenizer):
    with pytest.raises(DataError, match=r"t.jsonl: row 1, column 'tools': expected a list of tool schemas \(objects\), got int"):
        _prompts(tmp_path, tokenizer, [{"prompt": "a", "tools": [CALC]}, {"prompt": "b", "tools": 3}], chat_template=TOOLS, tools_key="tools")
    with pytest.raises(DataError, match=r"row 0, column 'tools': not valid JSON"):
        _prompts(tmp_path, tokenizer, [{"prompt": "a", "tools": "[calc"}], chat_template=TOOLS, tools_key="tools")
    with pytest.raises(DataError, match=r"data.tools_key: no row of .*t.jsonl has a column 'tool'; its first row's columns are \['prompt', 'tools'\]"):
        _prompts(tmp_path, tokenizer, [{"prompt": "a", "tools": [CALC]}], chat_template=TOOLS, tools_key="tool")


def test_a_tags_template_renders_its_rows(tmp_path, tokenizer):
    qa = copy.deepcopy(tokenizer)
    qa.chat_template = "{% for m in messages %}Q:{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
    rows = [{"prompt": "x", "data_source": "math"}, {"prompt": "y", "data_source": "code"}]
    assert _prompts(tmp_path, qa, rows, tag_to_template={"math": "chatml"}) == [
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n", "Q:yA:"]
    assert _prompts(tmp_path, qa, rows) == ["Q:xA:", "Q:yA:"]
    sft = write_rows(tmp_path / "s.jsonl", [{"prompt": "q", "response": "a", "data_source": "math"}])
    with pytest.raises(ConfigError, match="data.tag_to_template.math: longcot_V3 writes text after the assistant header"):
        build_sft_dataset(DataConfig(tag_to_template={"math": "longcot_V3"}), sft, qa)


@pytest.mark.parametrize("overrides, message", [
    (["data.tag_to_template={math: chatm}"], r"data.tag_to_template.math: 'chatm' is not a named template"),
    (["data.tools_key=tools", "data.custom_cls.path=x.py", "data.custom_cls.name=X"], "a data.custom_cls dataset templates its own rows"),
    (["data.tools_key=tools", "rollout.multi_turn.enable=true"], "offers the tools of tool_config_path to every prompt"),
])
def test_settings_that_cannot_template_per_row_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
