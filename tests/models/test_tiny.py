import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model


def _load(path):
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer


def test_default_model_matches_the_notes_recipe_and_loads_with_auto_classes(tiny_model_dir):
    model, tokenizer = _load(tiny_model_dir)
    cfg = model.config
    assert cfg.model_type == "qwen2"
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (128, 384, 3, 4)
    assert 600_000 < sum(p.numel() for p in model.parameters()) < 700_000
    assert model.dtype == torch.float32
    assert cfg.vocab_size == len(tokenizer) == 100
    assert (cfg.pad_token_id, cfg.eos_token_id) == (tokenizer.pad_token_id, tokenizer.eos_token_id)
    assert tokenizer.chat_template is not None


def test_same_seed_gives_bitwise_identical_weights_other_seed_differs(tmp_path):
    a = make_tiny_model(tmp_path / "a", seed=3)
    b = make_tiny_model(tmp_path / "b", seed=3)
    c = make_tiny_model(tmp_path / "c", seed=4)
    weights = lambda p: (p / "model.safetensors").read_bytes()  # noqa: E731
    assert weights(a) == weights(b)
    assert weights(a) != weights(c)


def test_building_leaves_the_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_tiny_model(tmp_path / "m", seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_custom_shape_and_realistic_vocab(tmp_path):
    path = make_tiny_model(tmp_path / "m", layers=1, hidden=64, heads=4, kv_heads=2, intermediate=96,
                           vocab_size=1000, max_position=64, tie_embeddings=True)
    model, tokenizer = _load(path)
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads, cfg.intermediate_size) == (1, 64, 2, 96)
    assert cfg.vocab_size == len(tokenizer) == 1000
    assert cfg.max_position_embeddings == 64 == tokenizer.model_max_length
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_generation_runs_through_the_chat_template(tiny_model_dir):
    model, tokenizer = _load(tiny_model_dir)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": ":51393="}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert out.shape[0] == 1 and out.shape[1] <= prompt["input_ids"].shape[1] + 4
    assert model.generation_config.eos_token_id == [2, 0]


def test_tokenizer_config_is_readable_by_transformers_4(tiny_model_dir):
    data = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert data["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert data["chat_template"] == (tiny_model_dir / "chat_template.jinja").read_text()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hidden": 100, "heads": 3}, "divisible by --heads"),
        ({"heads": 4, "kv_heads": 3}, "divisible by --kv-heads"),
        ({"hidden": 12, "heads": 4}, "must be even"),
        ({"layers": 0}, "--layers must be >= 1"),
        ({"vocab_size": 10}, "--vocab 100"),
    ],
)
def test_impossible_shapes_are_refused_with_the_flag_to_fix(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_tiny_model(tmp_path / "m", **kwargs)
