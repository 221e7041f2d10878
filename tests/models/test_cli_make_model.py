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
