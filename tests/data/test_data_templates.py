"""Named prompt templates (ROLL's names), enable_thinking, reply_prefix and template variables: the
exact prompt text each setting renders, under the tiny character-level ChatML tokenizer."""

import copy

import pytest
from data_helpers import chatml_ids, ids, write_rows

from posttrain.config import load_config
from posttrain.config.sections.data import CHAT_TEMPLATE_NAMES, DataConfig
from posttrain.data import build_rl_dataset, build_sft_dataset
from posttrain.data.templates import TEMPLATES
from posttrain.errors import ConfigError, DataError

# A template that shows which variables it was given.
THINKING = ("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}"
            "{% if enable_thinking is defined %}<think={{ enable_thinking }}>{% endif %}")
QA = "{% for m in messages %}Q:{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}A:{% endif %}"


def _prompt(tmp_path, tokenizer, rows=None, **cfg) -> str:
    """The templated text of the first RL prompt."""
    path = write_rows(tmp_path / "t.jsonl", rows or [{"prompt": "2+2?"}])
    data = DataConfig(return_full_prompt=True, max_prompt_length=2048, **cfg)
    return build_rl_dataset(data, path, tokenizer)[0].full_prompt


@pytest.fixture
def qa_tokenizer(tokenizer):
    """The tiny tokenizer with a non-ChatML template of its own: named templates that write their
    own text must not use it, the others must."""
    other = copy.deepcopy(tokenizer)
    other.chat_template = QA
    return other


def test_names_are_the_schema_choices():
    assert tuple(TEMPLATES) == CHAT_TEMPLATE_NAMES


def test_native_and_qwen2_5_keep_the_run_template(tmp_path, qa_tokenizer):
    assert _prompt(tmp_path, qa_tokenizer) == "Q:2+2?A:"
    assert _prompt(tmp_path, qa_tokenizer, chat_template_name="qwen2_5") == "Q:2+2?A:"
    assert _prompt(tmp_path, qa_tokenizer, chat_template_name="native", chat_template=THINKING) == "[user]2+2?[assistant]"


def test_chatml_writes_its_own_template(tmp_path, qa_tokenizer):
    text = _prompt(tmp_path, qa_tokenizer, chat_template_name="chatml", system_prompt="be brief")
    assert text == "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    path = write_rows(tmp_path / "s.jsonl", [{"prompt": "q", "response": "a"}])
    sft = build_sft_dataset(DataConfig(chat_template_name="chatml", max_length=256), path, qa_tokenizer)[0]
    assert sft.input_ids == chatml_ids(("user", "q"), ("assistant", "a"))  # a whole conversation: no open header
    assert sft.loss_mask == [0] * len(chatml_ids(("user", "q"), generation_prompt=True)) + [1] * len(ids("a")) + [1, 1]


def test_empty_is_one_chatml_user_turn_and_refuses_more(tmp_path, qa_tokenizer):
    assert _prompt(tmp_path, qa_tokenizer, chat_template_name="empty") == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(DataError, match=r"t.jsonl: row 0, column 'prompt': the chat template failed on this row: the empty template formats exactly one user message"):
        _prompt(tmp_path, qa_tokenizer, chat_template_name="empty", system_prompt="be brief")


def test_base_is_the_plain_text_instruction(tmp_path, qa_tokenizer):
    expected = (
        "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
        "The assistant first thinks about the reasoning process in the mind and then provides the user with "
        "the answer, ensuring that the final result in the answer is enclosed in \\boxed{{}}. The reasoning "
        "process and answer are enclosed within '<think>' '</think>' and '<answer>' '</answer>' tags, "
        "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>. "
        "User: 2+2? Assistant:"
    )
    assert _prompt(tmp_path, qa_tokenizer, chat_template_name="base") == expected


def test_long_thought_system_prompt_and_user_instruction(tmp_path, tokenizer):
    text = _prompt(tmp_path, tokenizer, chat_template_name="longCOT_qwen2.5")
    assert text.startswith("<|im_start|>system\nYour role as an assistant involves thoroughly exploring questions")
    assert text.endswith("through the above guidelines:<|im_end|>\n<|im_start|>user\n"
                         "Return your final response within \\boxed{}. 2+2?<|im_end|>\n<|im_start|>assistant\n")
    # An explicit system prompt, and a row's own system message, win over the template's.
    assert _prompt(tmp_path, tokenizer, chat_template_name="longCOT_qwen2.5", system_prompt="s") == (
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nReturn your final response within \\boxed{}. 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n")
    own = [{"prompt": [{"role": "system", "content": "mine"}, {"role": "user", "content": "q"}]}]
    assert _prompt(tmp_path, tokenizer, own, chat_template_name="longCOT_qwen2.5").startswith("<|im_start|>system\nmine<|im_end|>")


def test_longcot_v3_opens_a_thought_in_rl_prompts_only(tmp_path, tokenizer):
    assert _prompt(tmp_path, tokenizer, chat_template_name="longcot_V3") == (
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    path = write_rows(tmp_path / "s.jsonl", [{"prompt": "q", "response": "a"}])
    with pytest.raises(ConfigError, match="longcot_V3 writes text after the assistant header of RL prompts only; SFT data"):
        build_sft_dataset(DataConfig(chat_template_name="longcot_V3", max_length=256), path, tokenizer)
    with pytest.raises(ConfigError, match="data.reply_prefix starts the replies of RL prompts; SFT sequences hold"):
        build_sft_dataset(DataConfig(reply_prefix="go", max_length=256), path, tokenizer)


def test_enable_thinking_qwen3_and_template_kwargs(tmp_path, tokenizer):
    base = {"chat_template": THINKING}
    assert _prompt(tmp_path, tokenizer, **base) == "[user]2+2?[assistant]"  # null: the variable is not passed at all
    assert _prompt(tmp_path, tokenizer, **base, enable_thinking=False) == "[user]2+2?[assistant]<think=False>"
    assert _prompt(tmp_path, tokenizer, **base, chat_template_name="qwen3") == "[user]2+2?[assistant]<think=True>"
    # explicit settings win over the named template's
    assert _prompt(tmp_path, tokenizer, **base, chat_template_name="qwen3", enable_thinking=False).endswith("<think=False>")
    assert _prompt(tmp_path, tokenizer, **base, chat_template_name="qwen3",
                   apply_chat_template_kwargs={"enable_thinking": False}).endswith("<think=False>")
    with pytest.raises(ConfigError, match="data.enable_thinking is True but data.apply_chat_template_kwargs.enable_thinking is False"):
        _prompt(tmp_path, tokenizer, **base, enable_thinking=True, apply_chat_template_kwargs={"enable_thinking": False})


def test_reply_prefix_opens_the_assistant_turn(tmp_path, tokenizer):
    text = _prompt(tmp_path, tokenizer, reply_prefix="Let me think", system_prompt="s")
    assert text == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\nLet me think"
    path = write_rows(tmp_path / "t.jsonl", [{"prompt": "2+2?"}])
    ex = build_rl_dataset(DataConfig(reply_prefix="Let me think"), path, tokenizer)[0]
    assert ex.prompt_ids == chatml_ids(("user", "2+2?"), generation_prompt=True) + ids("Let me think")
    with pytest.raises(DataError, match="row 0.*exactly one user message"):
        _prompt(tmp_path, tokenizer, reply_prefix="Let me think", chat_template_name="empty")


def test_reply_prefix_the_template_drops_is_refused(tmp_path, tokenizer):
    drops = "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    with pytest.raises(DataError, match=r"row 0, column 'prompt': the chat template does not write data.reply_prefix 'go' back"):
        _prompt(tmp_path, tokenizer, reply_prefix="go", chat_template=drops)


def test_own_template_and_chat_template_conflict(tmp_path, tokenizer):
    with pytest.raises(ConfigError, match="data.chat_template_name: chatml writes its own template"):
        _prompt(tmp_path, tokenizer, chat_template_name="chatml", chat_template=THINKING)


def test_unknown_name_is_refused_at_load(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data: {chat_template_name: llama3}\n")
    with pytest.raises(ConfigError, match="data.chat_template_name.*llama3.*qwen2_5"):
        load_config(path)
