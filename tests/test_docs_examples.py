"""The examples in docs/data.md and docs/rewards.md are what the code reads and returns: each row loads
through posttrain's datasets, and the reward function runs as the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from posttrain.config.sections.data import DataConfig
from posttrain.data import build_dpo_dataset, build_rl_dataset, build_sft_dataset
from posttrain.models.tiny import build_tiny_tokenizer
from posttrain.rewards import check_return, load_reward_function

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)


def _rows(tmp_path: Path, name: str, rows: list[dict]) -> str:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def test_the_data_page_rows_load_as_it_says(tmp_path, tokenizer):
    rl, sft, conversation, dpo = (json.loads(b) for b in _blocks("data.md", "json"))
    example = build_rl_dataset(DataConfig(), _rows(tmp_path, "rl", [rl]), tokenizer)[0]
    assert (example.ground_truth, example.data_source, example.extra_info) == ("154", "posttrain/arithmetic", rl["extra_info"])
    assert tokenizer.decode(example.prompt_ids) == "<|im_start|>user\n95+59=<|im_end|>\n<|im_start|>assistant\n"

    def trained(example):  # the tokens the loss covers
        return tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])

    assert trained(build_sft_dataset(DataConfig(), _rows(tmp_path, "sft", [sft]), tokenizer)[0]) == "131<|im_end|>\n"
    turns = build_sft_dataset(DataConfig(messages_key="messages"), _rows(tmp_path, "conv", [conversation]), tokenizer)[0]
    assert trained(turns) == "4<|im_end|>\n6<|im_end|>\n"  # every assistant message, no user turn
    pair = build_dpo_dataset(DataConfig(), _rows(tmp_path, "dpo", [dpo]), tokenizer)[0]
    assert (trained(pair.chosen), trained(pair.rejected)) == ("58<|im_end|>\n", "57<|im_end|>\n")


def test_the_data_page_csv_and_plain_text_template(tmp_path, tokenizer):
    (csv_text,) = _blocks("data.md", "csv")
    (path := tmp_path / "rl.csv").write_text(csv_text)
    cfg = DataConfig(prompt_key="question", response_key="answer")
    example = build_rl_dataset(cfg, str(path), tokenizer)[0]
    assert (example.ground_truth, example.data_source) == ("4", "my_task")
    template = re.search(r'chat_template: "(.*)"', _blocks("data.md", "yaml")[0]).group(1)
    plain = build_rl_dataset(DataConfig(prompt_key="question", response_key="answer", chat_template=template), str(path), tokenizer)[0]
    assert tokenizer.decode(plain.prompt_ids) == "2+2="


def test_the_rewards_page_function_is_called_and_scored_as_it_says(tmp_path):
    (source,) = _blocks("rewards.md", "python")
    (path := tmp_path / "my_reward.py").write_text(source)
    fn = load_reward_function(str(path), "compute_score", {"bonus": 0.5})
    result = check_return(fn("posttrain/arithmetic", "131<|im_end|>", "131", {}))
    assert (result.score, result.extra, result.failure) == (1.5, {"acc": 1.0}, None)
    assert check_return(fn("posttrain/arithmetic", "13<|im_end|>", "131", {})).score == 0.0
