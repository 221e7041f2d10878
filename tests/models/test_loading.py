import json
import shutil

import pytest
import torch

from posttrain.config.sections.model import ModelConfig
from posttrain.errors import ConfigError, ModelError
from posttrain.models.loading import (
    causal_lm_from_config,
    load_causal_lm,
    load_reward_model,
    load_tokenizer,
    load_value_model,
    tokenizer_from_config,
)

IDS = torch.tensor([[1, 90, 88, 74, 87, 4, 22, 23]])  # (B, S)


# --- paths: never a download -------------------------------------------------------------------


@pytest.mark.parametrize("loader", [load_causal_lm, load_value_model, load_reward_model, load_tokenizer])
def test_hub_ids_are_refused_with_the_no_download_message(loader):
    with pytest.raises(ModelError, match="not an existing local directory.*never downloads"):
        loader("Qwen/Qwen2.5-0.5B-Instruct")


def test_missing_directory_and_directory_without_config_are_refused(tmp_path):
    with pytest.raises(ModelError, match="not an existing local directory"):
        load_causal_lm(tmp_path / "nope")
    with pytest.raises(ModelError, match="no config.json"):
        load_causal_lm(tmp_path)
    with pytest.raises(ModelError, match="no tokenizer_config.json or tokenizer.json"):
        load_tokenizer(tmp_path)
    with pytest.raises(ModelError, match="no model path given"):
        load_causal_lm("")


# --- causal LM options -------------------------------------------------------------------------


def test_dtype_choices(tiny_model_dir):
    assert load_causal_lm(tiny_model_dir).dtype == torch.float32
    assert load_causal_lm(tiny_model_dir, dtype="bf16").dtype == torch.bfloat16
    assert load_causal_lm(tiny_model_dir, dtype="fp16").dtype == torch.float16
    assert load_causal_lm(tiny_model_dir, dtype="auto").dtype == torch.float32  # as saved
    with pytest.raises(ConfigError, match="'float64' is not one of fp32, bf16, fp16, auto"):
        load_causal_lm(tiny_model_dir, dtype="float64")


def test_override_config_changes_the_model_and_refuses_unknown_names(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir, override_config={"attention_dropout": 0.25})
    assert model.config.attention_dropout == 0.25
    nested = load_causal_lm(tiny_model_dir, override_config={"model_config": {"rms_norm_eps": 1e-3}})
    assert nested.config.rms_norm_eps == 1e-3  # verl's Megatron-style nesting is flattened
    with pytest.raises(ModelError, match="override_config.dropout_typo.*no attribute"):
        load_causal_lm(tiny_model_dir, override_config={"dropout_typo": 0.1})


def test_rope_theta_and_scaling_change_the_rotary_frequencies(tiny_model_dir):
    base = load_causal_lm(tiny_model_dir)
    changed = load_causal_lm(tiny_model_dir, rope_theta=500.0, rope_scaling={"type": "linear", "factor": 2.0})
    assert changed.config.rope_parameters["rope_theta"] == 500.0
    assert changed.config.rope_parameters["rope_type"] == "linear"
    with torch.no_grad():
        assert not torch.allclose(base(IDS).logits, changed(IDS).logits)


def test_gradient_checkpointing_is_enabled_and_gives_the_same_gradients(tiny_model_dir):
    plain = load_causal_lm(tiny_model_dir)
    ckpt = load_causal_lm(tiny_model_dir, gradient_checkpointing=True)
    assert ckpt.is_activation_checkpointing and not plain.is_activation_checkpointing
    assert ckpt.config.use_cache is False
    for model in (plain, ckpt):
        model.train()
        model(IDS, labels=IDS).loss.backward()
    g_plain = plain.model.layers[0].mlp.up_proj.weight.grad
    g_ckpt = ckpt.model.layers[0].mlp.up_proj.weight.grad
    assert torch.allclose(g_plain, g_ckpt, atol=1e-6)


def test_attn_implementation_is_passed_through(tiny_model_dir):
    assert load_causal_lm(tiny_model_dir, attn_implementation="eager").config._attn_implementation == "eager"
    assert load_causal_lm(tiny_model_dir, attn_implementation="sdpa").config._attn_implementation == "sdpa"


def test_external_lib_is_imported_and_a_bad_one_is_refused(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "my_registry_mod.py").write_text("import builtins\nbuiltins._posttrain_test_imported = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    load_causal_lm(tiny_model_dir, external_lib="my_registry_mod")
    import builtins

    assert builtins._posttrain_test_imported is True
    del builtins._posttrain_test_imported
    with pytest.raises(ModelError, match="external_lib 'no_such_mod_xyz'"):
        load_causal_lm(tiny_model_dir, external_lib="no_such_mod_xyz")


# --- critic and reward model -------------------------------------------------------------------


def test_value_model_gives_one_value_per_token_without_dropout(tiny_model_dir):
    torch.manual_seed(0)
    critic = load_value_model(tiny_model_dir)
    critic.train()  # dropout would make two passes differ
    values_a, values_b = critic(IDS).logits, critic(IDS).logits  # (B, S, 1)
    assert values_a.shape == (1, IDS.shape[1], 1)
    assert torch.equal(values_a, values_b)
    torch.manual_seed(0)
    again = load_value_model(tiny_model_dir)
    assert torch.equal(again.score.weight, critic.score.weight)  # head reproducible under a seed


def test_value_model_body_is_the_policy_body(tiny_model_dir):
    policy = load_causal_lm(tiny_model_dir)
    critic = load_value_model(tiny_model_dir)
    assert torch.equal(policy.model.embed_tokens.weight, critic.model.embed_tokens.weight)


def test_reward_model_scores_each_sequence_at_its_last_real_token(tiny_model_dir):
    rm = load_reward_model(tiny_model_dir)
    pad = rm.config.pad_token_id
    padded = torch.cat([torch.full((1, 2), pad), IDS], dim=1)  # (B, 2 + S), left-padded
    with torch.no_grad():
        plain = rm(IDS).logits  # (B, 1)
        left = rm(padded, attention_mask=(padded != pad).long()).logits
    assert plain.shape == (1, 1)
    assert torch.allclose(plain, left, atol=1e-5)


def test_reward_model_takes_the_pad_id_from_the_tokenizer_when_config_lacks_it(tiny_model_dir, tmp_path):
    copy = shutil.copytree(tiny_model_dir, tmp_path / "rm")
    config = json.loads((copy / "config.json").read_text())
    config.pop("pad_token_id")
    (copy / "config.json").write_text(json.dumps(config))
    assert load_reward_model(copy).config.pad_token_id == 0


# --- tokenizer ---------------------------------------------------------------------------------


def test_tokenizer_only_directory_loads_and_gets_eos_as_pad_when_it_has_none(tiny_model_dir, tmp_path):
    copy = tmp_path / "tok"  # tokenizer files only: no config.json (which would supply a pad id)
    copy.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model_dir / name, copy / name)
    data = json.loads((copy / "tokenizer_config.json").read_text())
    data.pop("pad_token")
    (copy / "tokenizer_config.json").write_text(json.dumps(data))
    tokenizer = load_tokenizer(copy)
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"


def test_tokenizer_chat_template_override(tiny_model_dir):
    tokenizer = load_tokenizer(tiny_model_dir, chat_template="{{ messages[0]['content'] }}!")
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "hi!"


# --- from the `model` config section -----------------------------------------------------------


def test_tokenizer_from_config_uses_tokenizer_path_and_template_precedence(tiny_model_dir, tmp_path):
    template_file = tmp_path / "t.jinja"
    template_file.write_text("FILE{{ messages[0]['content'] }}")
    msgs = [{"role": "user", "content": "x"}]
    cfg = ModelConfig(path=str(tmp_path / "elsewhere"), tokenizer_path=str(tiny_model_dir),
                      custom_chat_template="STR{{ messages[0]['content'] }}")
    assert tokenizer_from_config(cfg).apply_chat_template(msgs, tokenize=False) == "STRx"
    cfg = ModelConfig(path=str(tiny_model_dir), custom_chat_template="STR", chat_template_path=str(template_file))
    assert tokenizer_from_config(cfg).apply_chat_template(msgs, tokenize=False) == "FILEx"
    with pytest.raises(ConfigError, match="model.chat_template_path"):
        tokenizer_from_config(ModelConfig(path=str(tiny_model_dir), chat_template_path=str(tmp_path / "no.jinja")))


def test_causal_lm_from_config_applies_the_section(tiny_model_dir):
    cfg = ModelConfig(path=str(tiny_model_dir), dtype="bf16", enable_gradient_checkpointing=True,
                      override_config={"attention_dropout": 0.5}, attn_implementation="eager", rope_theta=77.0)
    model = causal_lm_from_config(cfg)
    assert model.dtype == torch.bfloat16
    assert model.is_activation_checkpointing
    assert model.config.attention_dropout == 0.5
    assert model.config._attn_implementation == "eager"
    assert model.config.rope_parameters["rope_theta"] == 77.0


def test_max_model_len_beyond_the_positions_is_refused(tiny_model_dir):
    causal_lm_from_config(ModelConfig(path=str(tiny_model_dir), max_model_len=512))
    with pytest.raises(ConfigError, match="max_model_len 513 exceeds.*512"):
        causal_lm_from_config(ModelConfig(path=str(tiny_model_dir), max_model_len=513))
