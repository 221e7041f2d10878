import doctest

import pytest
from jinja2 import TemplateError

import posttrain.models.tokenizer as tokenizer_module
from posttrain.errors import ConfigError
from posttrain.models.tokenizer import BASE_VOCAB_SIZE, CHARACTERS, build_tiny_tokenizer


def test_doctests():
    assert doctest.testmod(tokenizer_module).failed == 0


def test_every_character_is_one_token_and_round_trips():
    tok = build_tiny_tokenizer()
    text = "".join(CHARACTERS)
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


def test_digits_are_single_distinct_tokens():
    tok = build_tiny_tokenizer()
    ids = [tok(d)["input_ids"] for d in "0123456789"]
    assert all(len(i) == 1 for i in ids)
    assert len({i[0] for i in ids}) == 10


def test_special_tokens_have_fixed_ids_and_roles():
    tok = build_tiny_tokenizer()
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|unk|>"]
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 2, 3)
    assert tok.bos_token is None
    # A special token written in text is one token, not 12 characters.
    assert tok("<|im_end|>")["input_ids"] == [2]
    assert tok.decode([22, 2], skip_special_tokens=True) == "1"


def test_non_ascii_bytes_become_unk():
    tok = build_tiny_tokenizer()
    # "é" is two UTF-8 bytes, each outside the ASCII vocabulary
    assert tok("é")["input_ids"] == [tok.unk_token_id, tok.unk_token_id]


def test_auto_tokenizer_from_disk_gives_the_same_ids(tmp_path):
    from transformers import AutoTokenizer

    from posttrain.models.tiny import make_tiny_model

    text = "a b\nc 12+7= ~{}"
    loaded = AutoTokenizer.from_pretrained(make_tiny_model(tmp_path / "m"))
    built = build_tiny_tokenizer()
    assert loaded(text)["input_ids"] == built(text)["input_ids"]
    assert loaded.decode(loaded(text)["input_ids"]) == text


def test_chat_template_single_turn_with_generation_prompt():
    tok = build_tiny_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "12+7="}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\n12+7=<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_multi_turn_with_system_and_no_generation_prompt():
    tok = build_tiny_tokenizer()
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "1+1="},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2+2="},
    ]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == (
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\n1+1=<|im_end|>\n"
        "<|im_start|>assistant\n2<|im_end|>\n<|im_start|>user\n2+2=<|im_end|>\n"
    )


def test_chat_template_refuses_unknown_roles():
    tok = build_tiny_tokenizer()
    with pytest.raises(TemplateError, match="unknown chat role"):
        tok.apply_chat_template([{"role": "robot", "content": "x"}], tokenize=False)


def test_chat_template_renders_tools_tool_calls_and_tool_messages_as_qwen():
    tok = build_tiny_tokenizer()
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {"a": {}, "b": {}}}}}]
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"a": 1}}}]},
        {"role": "tool", "content": "1"},
        {"role": "tool", "content": "2"},
        {"role": "assistant", "content": "3"},
    ]
    assert tok.apply_chat_template(messages, tools=tools, tokenize=False) == (
        "<|im_start|>system\ns\n<tools>calc(a,b)</tools><|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "calc", "arguments": {"a": 1}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n3<|im_end|>\n"
    )


def test_vocab_size_pads_with_unreachable_fillers():
    tok = build_tiny_tokenizer(1000)
    assert len(tok) == 1000
    assert tok.convert_ids_to_tokens(BASE_VOCAB_SIZE) == "<|filler_0|>"
    # Encoding is unchanged by the fillers: the characters keep their ids.
    assert tok("<|filler_0|>")["input_ids"] == build_tiny_tokenizer()("<|filler_0|>")["input_ids"]


def test_vocab_size_smaller_than_characters_is_refused():
    with pytest.raises(ConfigError, match="--vocab 100"):
        build_tiny_tokenizer(50)
