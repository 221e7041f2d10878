import logging

import pytest
import torch
from data_helpers import chatml_ids, ids, verl_row, write_rows

from posttrain.config.sections.data import DataConfig
from posttrain.data import PromptBatch, build_rl_dataset, collate_prompts, pad_token_id
from posttrain.data.filtering import prompt_lengths
from posttrain.errors import ConfigError, DataError


def test_verl_layout_row_becomes_an_rl_example(tmp_path, tokenizer):
    path = write_rows(tmp_path / "train.parquet", [verl_row("3 1 2", "1 2 3"), verl_row("b a", "a b", "letters")])
    ds = build_rl_dataset(DataConfig(), path, tokenizer)
    assert len(ds) == 2
    ex = ds[1]
    assert ex.index == 1
    assert ex.prompt_ids == chatml_ids(("user", "b a"), generation_prompt=True)
    assert ex.prompt == [{"role": "user", "content": "b a"}]
    assert (ex.data_source, ex.ground_truth, ex.extra_info) == ("letters", "a b", {"split": "train", "index": 0})
    assert ex.raw_chat is None and ex.full_prompt is None


def test_string_prompt_system_prompt_and_optional_outputs(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"question": "hi", "answer": "42"}])
    cfg = DataConfig(prompt_key="question", response_key="answer", system_prompt="be brief", return_raw_chat=True, return_full_prompt=True)
    ex = build_rl_dataset(cfg, path, tokenizer)[0]
    assert ex.prompt == "hi"
    assert ex.ground_truth == "42"  # no reward_model column: the response_key column (Trinity taskset)
    assert ex.data_source == ""
    assert ex.raw_chat == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert ex.full_prompt == "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert ex.prompt_ids == chatml_ids(("system", "be brief"), ("user", "hi"), generation_prompt=True)


def test_system_prompt_key_wins_and_existing_system_message_is_kept(tmp_path, tokenizer):
    rows = [
        {"prompt": "x", "sys": "row sys"},
        {"prompt": [{"role": "system", "content": "own"}, {"role": "user", "content": "y"}], "sys": None},
    ]
    path = write_rows(tmp_path / "t.jsonl", rows)
    ds = build_rl_dataset(DataConfig(system_prompt="default", system_prompt_key="sys"), path, tokenizer)
    assert ds[0].prompt_ids == chatml_ids(("system", "row sys"), ("user", "x"), generation_prompt=True)
    assert ds[1].prompt_ids == chatml_ids(("system", "own"), ("user", "y"), generation_prompt=True)


def test_messages_key_and_prompt_dict_keys(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"chat": [{"role": "user", "content": "m"}], "p": {"q": {"text": "deep"}}}])
    assert build_rl_dataset(DataConfig(messages_key="chat"), path, tokenizer)[0].prompt_ids == chatml_ids(("user", "m"), generation_prompt=True)
    ex = build_rl_dataset(DataConfig(prompt_key="p", prompt_dict_keys=["q", "text"]), path, tokenizer)[0]
    assert ex.prompt_ids == chatml_ids(("user", "deep"), generation_prompt=True)


def test_chat_template_inline_and_from_file(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "ab"}])
    inline = "{% for m in messages %}Q:{{ m['content'] }}{% endfor %}A:"
    assert build_rl_dataset(DataConfig(chat_template=inline), path, tokenizer)[0].prompt_ids == ids("Q:abA:")
    (tmp_path / "t.jinja").write_text(inline)
    assert build_rl_dataset(DataConfig(chat_template=str(tmp_path / "t.jinja")), path, tokenizer)[0].prompt_ids == ids("Q:abA:")
    with pytest.raises(ConfigError, match=r"data.chat_template: file not found: nope.jinja"):
        build_rl_dataset(DataConfig(chat_template="nope.jinja"), path, tokenizer)


def test_template_error_names_the_row_when_the_dataset_is_built(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": [{"role": "robot", "content": "x"}]}])
    with pytest.raises(DataError, match=r"t.jsonl: row 0, column 'prompt': the chat template failed on this row: unknown chat role robot"):
        build_rl_dataset(DataConfig(), path, tokenizer)


def test_truncation_error_at_build_and_left_right_middle_cuts(tmp_path, tokenizer, caplog):
    rows = [{"prompt": "short"}, {"prompt": "a much longer prompt"}, {"prompt": "short"}, {"prompt": "an even much longer prompt"}]
    path = write_rows(tmp_path / "t.csv", rows)
    full = chatml_ids(("user", "a much longer prompt"), generation_prompt=True)
    longest = chatml_ids(("user", "an even much longer prompt"), generation_prompt=True)
    limit = len(chatml_ids(("user", "short"), generation_prompt=True))
    with pytest.raises(DataError) as err:  # at build time: not when the sampler first draws row 1
        build_rl_dataset(DataConfig(max_prompt_length=limit), path, tokenizer)
    assert str(err.value) == (
        f"{path}: row 1, column 'prompt': {len(full)} tokens after the chat template, longer than "
        f"data.max_prompt_length={limit}; raise data.max_prompt_length or set data.truncation to left, right or middle, "
        "or set data.filter_overlong_prompts: true to drop such rows (1 more rows of data.train_files are too long as well)"
    )
    head, tail = limit // 2, limit - limit // 2
    for mode, expected, kept in [("left", full[-limit:], f"the last {limit}"), ("right", full[:limit], f"the first {limit}"),
                                 ("middle", full[:head] + full[-tail:], f"the first {head} and the last {tail}")]:
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            ds = build_rl_dataset(DataConfig(max_prompt_length=limit, truncation=mode), path, tokenizer)
            assert ds[1].prompt_ids == expected and ds[0].prompt_ids == chatml_ids(("user", "short"), generation_prompt=True)
            ds[1], ds[3]  # reading cut rows says nothing more: the count is given once, at build
        assert [r.getMessage() for r in caplog.records] == [
            f"data.train_files: 2 of 4 prompts are longer than data.max_prompt_length={limit} tokens (longest "
            f"{len(longest)}; first at {path}: row 1, column 'prompt'); data.truncation={mode} keeps {kept} tokens of each"
        ]


def test_filter_overlong_prompts_with_two_workers(tmp_path, tokenizer):
    rows = [{"prompt": "x" * n} for n in (1, 9, 2, 12, 3, 4, 15, 5)]
    path = write_rows(tmp_path / "t.jsonl", rows)
    limit = len(chatml_ids(("user", "x" * 5), generation_prompt=True))
    ds = build_rl_dataset(DataConfig(max_prompt_length=limit, truncation="left"), path, tokenizer)
    assert prompt_lengths(ds, ds.indices, workers=2) == prompt_lengths(ds, ds.indices, workers=1)
    for workers in (1, 2):
        cfg = DataConfig(max_prompt_length=limit, filter_overlong_prompts=True, filter_overlong_prompts_workers=workers)
        kept = build_rl_dataset(cfg, path, tokenizer)
        assert kept.indices == [0, 2, 4, 5, 7]
        assert [kept[k].prompt for k in range(len(kept))] == ["x", "xx", "xxx", "xxxx", "xxxxx"]


def test_filter_that_drops_everything_is_an_error(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "long prompt"}])
    with pytest.raises(DataError, match=r"^data.val_files: no examples left; every prompt is longer than data.max_prompt_length"):
        build_rl_dataset(DataConfig(max_prompt_length=3, filter_overlong_prompts=True), path, tokenizer, split="val")


def test_missing_column_names_file_row_column_and_setting(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "a"}, {"question": "b"}])
    with pytest.raises(DataError) as err:
        build_rl_dataset(DataConfig(), path, tokenizer)
    assert str(err.value) == f"{path}: row 1 has no column 'prompt'; its columns are ['question']; set data.prompt_key to one of them"


@pytest.mark.parametrize(
    "cell, message",
    [
        (5, "expected a string or a list of chat messages, got int 5"),
        (None, "expected a string or a list of chat messages, got NoneType None"),
        ([{"role": "user"}], "message 0 must be an object with string 'role' and 'content', got dict {'role': 'user'}"),
        ([], "expected a non-empty list of chat messages {role, content}, got list []"),
    ],
)
def test_non_string_prompt(tmp_path, tokenizer, cell, message):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "ok"}, {"prompt": "ok"}, {"prompt": cell}])
    with pytest.raises(DataError) as err:
        build_rl_dataset(DataConfig(), path, tokenizer)
    assert str(err.value) == f"{path}: row 2, column 'prompt': {message}"


def test_bad_reward_model_and_explicit_reward_fn_key(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "a", "reward_model": "5"}])
    with pytest.raises(DataError, match=r"row 0, column 'reward_model': expected an object with a 'ground_truth' key"):
        build_rl_dataset(DataConfig(), path, tokenizer)
    path = write_rows(tmp_path / "u.jsonl", [{"prompt": "a", "src": "gsm8k"}])
    assert build_rl_dataset(DataConfig(reward_fn_key="src"), path, tokenizer)[0].data_source == "gsm8k"
    with pytest.raises(DataError, match=r"row 0 has no column 'task'; its columns are \['prompt', 'src'\]; set data.reward_fn_key"):
        build_rl_dataset(DataConfig(reward_fn_key="task"), path, tokenizer)


def test_collate_left_pads_to_the_longest_prompt(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "ab", "data_source": "s"}, {"prompt": "abcd", "data_source": "t"}])
    ds = build_rl_dataset(DataConfig(chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}"), path, tokenizer)
    batch = collate_prompts([ds[0], ds[1]], pad_token_id(tokenizer), uid_prefix="s3")
    assert isinstance(batch, PromptBatch)  # the rollout engine's input record, no conversion
    assert batch.input_ids.tolist() == [[0, 0] + ids("ab"), ids("abcd")]
    assert batch.attention_mask.tolist() == [[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]
    assert batch.input_ids.dtype == torch.long and batch.attention_mask.dtype == torch.float32
    assert batch.uid == ["s3-0", "s3-1"] and batch.index == [0, 1] and batch.data_source == ["s", "t"]
    assert batch.raw_prompt == [None, None] and batch.raw_chat == [None, None]  # return_* off
    assert len(batch) == 2
    grouped = batch.repeat_interleave(2)  # the engine's n responses per prompt keep every field aligned
    assert grouped.uid == ["s3-0", "s3-0", "s3-1", "s3-1"] and grouped.index == [0, 0, 1, 1]


def test_collate_carries_full_prompt_and_raw_chat_when_asked(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "ab", "data_source": "s"}])
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    ds = build_rl_dataset(DataConfig(chat_template=template, return_full_prompt=True, return_raw_chat=True), path, tokenizer)
    batch = collate_prompts([ds[0]], pad_token_id(tokenizer))
    assert batch.raw_prompt == ["ab"] and batch.raw_chat == [[{"role": "user", "content": "ab"}]]


def test_val_split_and_files_relative_to_dataset_dir(tmp_path, tokenizer):
    write_rows(tmp_path / "v.jsonl", [{"prompt": "a"}])
    ds = build_rl_dataset(DataConfig(dataset_dir=str(tmp_path)), ["v.jsonl"], tokenizer, split="val")
    assert ds.table.paths == [str(tmp_path / "v.jsonl")]
    with pytest.raises(DataError, match=r"v.jsonl: data file not found"):
        build_rl_dataset(DataConfig(), "v.jsonl", tokenizer)


def test_rows_with_images_for_a_text_policy_or_videos_are_refused_not_trained_as_text(tmp_path, tokenizer):
    rows = [{"prompt": "x", "images": []}, {"prompt": "y", "images": None}, {"prompt": "z", "images": ["a.png"]}]
    path = write_rows(tmp_path / "mm.jsonl", rows)
    with pytest.raises(DataError, match=r"mm.jsonl: row 2, column 'images': this row has images \(data.image_key: images\); "
                                        r"the policy \(model.path\) is a text-only model"):
        build_rl_dataset(DataConfig(prompt_key="prompt"), path, tokenizer)
    assert len(build_rl_dataset(DataConfig(prompt_key="prompt", image_key="pictures"), path, tokenizer)) == 3  # another column
    clips = write_rows(tmp_path / "clips.jsonl", [{"prompt": "x", "clip": "v.mp4"}])
    with pytest.raises(DataError, match=r"row 0, column 'clip': this row has videos \(data.video_key: clip\)"):
        build_rl_dataset(DataConfig(prompt_key="prompt", video_key="clip"), clips, tokenizer)
    assert len(build_rl_dataset(DataConfig(prompt_key="prompt"), clips, tokenizer)) == 1
