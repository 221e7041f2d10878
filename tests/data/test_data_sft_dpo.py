import pytest
from data_helpers import chatml_ids, write_rows

from posttrain.config.sections.data import DataConfig
from posttrain.data import build_dpo_dataset, build_sft_dataset, collate_dpo, collate_sft
from posttrain.errors import DataError


def test_prompt_response_mask_covers_the_response_and_its_end_of_turn(tmp_path, tokenizer):
    path = write_rows(tmp_path / "s.parquet", [{"question": "2+2", "answer": "4"}])
    ex = build_sft_dataset(DataConfig(prompt_key="question", response_key="answer"), path, tokenizer)[0]
    prompt = chatml_ids(("user", "2+2"), generation_prompt=True)
    assert ex.input_ids == chatml_ids(("user", "2+2"), ("assistant", "4"))
    # loss on "4", <|im_end|> and the newline after it; nothing before
    assert ex.loss_mask == [0] * len(prompt) + [1, 1, 1]


def test_multi_turn_loss_on_every_assistant_turn_only(tmp_path, tokenizer):
    chat = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
    ]
    path = write_rows(tmp_path / "s.jsonl", [{"messages": chat}])
    ex = build_sft_dataset(DataConfig(messages_key="messages", system_prompt="ignored: row has one"), path, tokenizer)[0]
    head = chatml_ids(("system", "s"), ("user", "u1"), generation_prompt=True)
    mid = chatml_ids(("user", "u2"), generation_prompt=True)
    turn = 4  # "a", "1", <|im_end|>, "\n"
    assert ex.input_ids == chatml_ids(*[(m["role"], m["content"]) for m in chat])
    assert ex.loss_mask == [0] * len(head) + [1] * turn + [0] * len(mid) + [1] * turn


def test_sft_loss_turns_last_trains_only_the_final_message(tmp_path, tokenizer):
    chat = [
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
    ]
    path = write_rows(tmp_path / "s.jsonl", [{"messages": chat}])
    cfg = DataConfig(messages_key="messages", sft_loss_turns="last", system_prompt="s")
    ex = build_sft_dataset(cfg, path, tokenizer)[0]
    context = chatml_ids(("system", "s"), ("user", "u1"), ("assistant", "a1"), ("user", "u2"), generation_prompt=True)
    assert ex.input_ids == chatml_ids(("system", "s"), *[(m["role"], m["content"]) for m in chat])
    # a1 is context now (the system prompt added in front shifts the turns by one)
    assert ex.loss_mask == [0] * len(context) + [1] * 4


def test_system_prompt_is_added_and_not_trained(tmp_path, tokenizer):
    path = write_rows(tmp_path / "s.jsonl", [{"prompt": "q", "response": "r"}])
    ex = build_sft_dataset(DataConfig(system_prompt="sys"), path, tokenizer)[0]
    assert ex.input_ids == chatml_ids(("system", "sys"), ("user", "q"), ("assistant", "r"))
    assert sum(ex.loss_mask) == 3 and ex.loss_mask[-3:] == [1, 1, 1]


def test_response_dict_keys(tmp_path, tokenizer):
    path = write_rows(tmp_path / "s.jsonl", [{"prompt": "q", "out": {"text": "r"}}])
    ex = build_sft_dataset(DataConfig(response_key="out", response_dict_keys=["text"]), path, tokenizer)[0]
    assert ex.input_ids == chatml_ids(("user", "q"), ("assistant", "r"))
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "q", "out": {"txt": "r"}}])
    with pytest.raises(DataError, match=r"t.jsonl: row 0, column 'out': no key 'text' inside the cell .*; check data.response_dict_keys"):
        build_sft_dataset(DataConfig(response_key="out", response_dict_keys=["text"]), path, tokenizer)


def test_sft_truncation_modes_cut_ids_and_mask_together(tmp_path, tokenizer):
    path = write_rows(tmp_path / "s.jsonl", [{"prompt": "question", "response": "answer"}])
    full = build_sft_dataset(DataConfig(), path, tokenizer)[0]
    left = build_sft_dataset(DataConfig(max_length=10, truncation="left"), path, tokenizer)[0]
    right = build_sft_dataset(DataConfig(max_length=10, truncation="right"), path, tokenizer)[0]
    assert (left.input_ids, left.loss_mask) == (full.input_ids[-10:], full.loss_mask[-10:])
    assert (right.input_ids, right.loss_mask) == (full.input_ids[:10], full.loss_mask[:10])
    middle = build_sft_dataset(DataConfig(max_length=10, truncation="middle"), path, tokenizer)[0]
    assert (middle.input_ids, middle.loss_mask) == (full.input_ids[:5] + full.input_ids[-5:], full.loss_mask[:5] + full.loss_mask[-5:])
    with pytest.raises(DataError) as err:  # when the dataset is built, not when the row is read
        build_sft_dataset(DataConfig(max_length=10), path, tokenizer)
    assert str(err.value) == (
        f"{path}: row 0, column 'response': {len(full.input_ids)} tokens after the chat template, longer than "
        "data.max_length=10; raise data.max_length or set data.truncation to left, right or middle"
    )


def test_sft_bad_rows(tmp_path, tokenizer):
    path = write_rows(tmp_path / "s.jsonl", [{"prompt": "q", "response": 3}])
    with pytest.raises(DataError, match=r"s.jsonl: row 0, column 'response': expected a string response, got int"):
        build_sft_dataset(DataConfig(), path, tokenizer)
    path = write_rows(tmp_path / "m.jsonl", [{"messages": [{"role": "user", "content": "q"}]}])
    with pytest.raises(DataError, match=r"m.jsonl: row 0, column 'messages': no assistant message to train on"):
        build_sft_dataset(DataConfig(messages_key="messages"), path, tokenizer)  # found at build time


def test_sft_collate_right_pads(tmp_path, tokenizer):
    path = write_rows(tmp_path / "s.jsonl", [{"prompt": "q", "response": "r"}, {"prompt": "qq", "response": "rr"}])
    ds = build_sft_dataset(DataConfig(), path, tokenizer)
    batch = collate_sft([ds[0], ds[1]], pad_id=0)
    n0, n1 = len(ds[0].input_ids), len(ds[1].input_ids)
    assert n1 == n0 + 2
    assert batch.input_ids[0].tolist() == ds[0].input_ids + [0, 0]
    assert batch.attention_mask[0].tolist() == [1] * n0 + [0, 0]
    assert batch.loss_mask[0].tolist() == [float(b) for b in ds[0].loss_mask] + [0.0, 0.0]


def test_dpo_pairs_share_the_prompt_and_mask_only_the_completion(tmp_path, tokenizer):
    rows = [{"prompt": "q", "chosen": "good", "rejected": [{"role": "assistant", "content": "bad"}]}]
    path = write_rows(tmp_path / "p.jsonl", rows)
    ex = build_dpo_dataset(DataConfig(), path, tokenizer)[0]
    prompt = chatml_ids(("user", "q"), generation_prompt=True)
    assert ex.chosen.input_ids == chatml_ids(("user", "q"), ("assistant", "good"))
    assert ex.rejected.input_ids == chatml_ids(("user", "q"), ("assistant", "bad"))
    assert ex.chosen.loss_mask == [0] * len(prompt) + [1] * 6
    assert ex.rejected.loss_mask == [0] * len(prompt) + [1] * 5
    batch = collate_dpo([ex], pad_id=0)
    assert batch.chosen.input_ids.shape == (1, len(ex.chosen.input_ids))
    assert batch.rejected.input_ids.shape == (1, len(ex.rejected.input_ids))


def test_dpo_custom_keys_and_missing_column(tmp_path, tokenizer):
    path = write_rows(tmp_path / "p.csv", [{"prompt": "q", "good": "a", "bad": "b"}])
    ex = build_dpo_dataset(DataConfig(chosen_key="good", rejected_key="bad"), path, tokenizer)[0]
    assert ex.chosen.input_ids[-4:] == chatml_ids(("assistant", "a"))[-4:]
    with pytest.raises(DataError) as err:
        build_dpo_dataset(DataConfig(), path, tokenizer)
    assert str(err.value) == f"{path}: row 0 has no column 'chosen'; its columns are ['bad', 'good', 'prompt']; set data.chosen_key to one of them"


def test_query_key_joins_the_query_to_the_prompt_after_a_newline(tmp_path, tokenizer):
    # ROLL's SFT rows (code_alpaca): instruction + "\n" + input, no newline when the input is empty or null
    rows = [{"instruction": "add", "input": "1 2", "output": "3"}, {"instruction": "hi", "input": "", "output": "yo"},
            {"instruction": "hey", "input": None, "output": "yo"}]
    path = write_rows(tmp_path / "s.jsonl", rows)
    cfg = DataConfig(prompt_key="instruction", query_key="input", response_key="output")
    ds = build_sft_dataset(cfg, path, tokenizer)
    assert ds[0].input_ids == chatml_ids(("user", "add\n1 2"), ("assistant", "3"))
    assert ds[1].input_ids == chatml_ids(("user", "hi"), ("assistant", "yo"))
    assert ds[2].input_ids == chatml_ids(("user", "hey"), ("assistant", "yo"))
    without = build_sft_dataset(DataConfig(prompt_key="instruction", response_key="output"), path, tokenizer)
    assert without[0].input_ids == chatml_ids(("user", "add"), ("assistant", "3"))
    bad = write_rows(tmp_path / "b.jsonl", [{"instruction": "a", "input": 5, "output": "b"}])
    with pytest.raises(DataError, match=r"row 0, column 'input'.*expected a string query"):
        build_sft_dataset(cfg, bad, tokenizer)


def test_sft_trim_final_newline_ends_the_sequence_at_the_end_of_turn(tmp_path, tokenizer):
    # ROLL's SFT rows: the newline chatml writes after the final <|im_end|> is neither input nor trained
    path = write_rows(tmp_path / "s.parquet", [{"prompt": "2+2", "response": "4"}])
    full = build_sft_dataset(DataConfig(), path, tokenizer)[0]
    cut = build_sft_dataset(DataConfig(sft_trim_final_newline=True), path, tokenizer)[0]
    assert cut.input_ids == full.input_ids[:-1] and full.input_ids[-1] == tokenizer.encode("\n")[-1]
    assert cut.loss_mask == full.loss_mask[:-1] and sum(cut.loss_mask) == 2  # "4" and <|im_end|>
