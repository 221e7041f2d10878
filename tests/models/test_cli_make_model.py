from transformers import AutoConfig

from posttrain.cli import main


def test_cli_make_model_tiny_writes_a_loadable_model(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["make-model", "tiny", str(out), "--layers", "2", "--hidden", "64", "--heads", "2",
                 "--vocab", "128", "--seed", "1"]) == 0
    assert "parameters" in capsys.readouterr().out
    config = AutoConfig.from_pretrained(out, local_files_only=True)
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (2, 64, 128)


def test_cli_make_model_bad_shape_exits_2(tmp_path, capsys):
    assert main(["make-model", "tiny", str(tmp_path / "m"), "--hidden", "100", "--heads", "3"]) == 2
    assert "--hidden 100 must be divisible by --heads 3" in capsys.readouterr().err


def test_cli_make_model_shape_gives_the_real_dimensions_and_flags_override_them(tmp_path, capsys):
    """--shape qwen2.5-0.5b takes Qwen2.5-0.5B's config.json dimensions; --layers/--vocab override
    single values (one layer and a small vocabulary keep the test fast); --dtype bf16 saves bf16."""
    from safetensors import safe_open

    from posttrain.cli.make_model import _SHAPES
    from posttrain.models.tiny import SHAPES

    assert tuple(SHAPES) == _SHAPES
    out = tmp_path / "m"
    assert main(["make-model", "tiny", str(out), "--shape", "qwen2.5-0.5b", "--layers", "1", "--vocab", "1024",
                 "--dtype", "bf16"]) == 0
    assert "qwen2.5-0.5b-shaped" in capsys.readouterr().out
    c = AutoConfig.from_pretrained(out, local_files_only=True)
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
            c.intermediate_size, c.vocab_size, c.tie_word_embeddings) == (1, 896, 14, 2, 4864, 1024, True)
    with safe_open(out / "model.safetensors", framework="pt") as w:
        assert str(w.get_slice("model.embed_tokens.weight").get_dtype()) == "BF16"
