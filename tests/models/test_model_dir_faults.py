"""A damaged model directory is named in one line: a cut-short or corrupt safetensors file, weights
that do not fit config.json (shapes, missing layers), pickle weight files that hold more than
tensors. Pickle-only directories holding tensors load (torch.load weights_only=True)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from cli_run_helpers import assert_user_error, posttrain, tiny_run, write_config
from safetensors.torch import load_file, save_file

from posttrain.errors import ModelError
from posttrain.models.loading import load_causal_lm, load_value_model


def copy_of(src, dst):
    shutil.copytree(src, dst)
    return dst


def edit_config(model_dir, **changes):
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def to_pickle_only(model_dir, state=None):
    """Replace model.safetensors by pytorch_model.bin holding `state` (default: the same tensors)."""
    weights = model_dir / "model.safetensors"
    torch.save(load_file(weights) if state is None else state, model_dir / "pytorch_model.bin")
    weights.unlink()


class Payload:
    """Unpickling this would run `touch`: a pickle weight file must never be trusted that far."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_truncated_safetensors_is_named_from_its_header(tiny_model_dir, tmp_path):
    model = copy_of(tiny_model_dir, tmp_path / "m")
    weights = model / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(ModelError) as err:
        load_causal_lm(model)
    assert str(err.value).startswith(f"{weights}: truncated: {size - 100} bytes, but its header describes {size} bytes")
    weights.write_bytes(b"\xff" * 50)  # a header length of 2**64 - 1
    with pytest.raises(ModelError, match="truncated or not a safetensors file"):
        load_causal_lm(model)
    weights.write_bytes((20).to_bytes(8, "little") + b"{not json at all!!!}")
    with pytest.raises(ModelError, match=f"{weights}: corrupt safetensors header"):
        load_causal_lm(model)


def test_shapes_that_config_json_does_not_describe_are_named(tiny_model_dir, tmp_path):
    model = copy_of(tiny_model_dir, tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    edit_config(model, vocab_size=config["vocab_size"] + 8)
    with pytest.raises(ModelError) as err:
        load_causal_lm(model)
    message = str(err.value)
    assert f"{model}: lm_head.weight has shape ({config['vocab_size']}, {config['hidden_size']})" in message
    assert f"describes ({config['vocab_size'] + 8}, {config['hidden_size']}) (and 1 more tensors)" in message
    assert "restore the config.json saved with them" in message


def test_missing_layers_are_an_error_not_a_random_init(tiny_model_dir, tmp_path):
    model = copy_of(tiny_model_dir, tmp_path / "m")
    layers = json.loads((model / "config.json").read_text())["num_hidden_layers"]
    edit_config(model, num_hidden_layers=layers + 1, layer_types=["full_attention"] * (layers + 1))
    with pytest.raises(ModelError, match=rf"model.safetensors lacks \d+ tensors .*\(e.g. model.layers.{layers}\."):
        load_causal_lm(model)


def test_a_critic_may_lack_only_its_new_head(tiny_model_dir):
    critic = load_value_model(tiny_model_dir)  # score.* is new: no error
    assert critic.score.weight.shape[0] == 1


def test_pickle_only_directory_loads_the_same_weights(tiny_model_dir, tmp_path):
    model = copy_of(tiny_model_dir, tmp_path / "m")
    to_pickle_only(model)
    loaded = load_causal_lm(model).state_dict()
    expected = load_causal_lm(tiny_model_dir).state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)


def test_pickle_holding_code_is_refused_without_running_it(tiny_model_dir, tmp_path):
    model = copy_of(tiny_model_dir, tmp_path / "m")
    marker = tmp_path / "ran"
    to_pickle_only(model, {**load_file(model / "model.safetensors"), "extra": Payload(marker)})
    with pytest.raises(ModelError) as err:
        load_causal_lm(model)
    assert str(err.value).startswith(f"{model / 'pytorch_model.bin'}: holds Python objects besides tensors")
    assert "weights_only=True" in str(err.value) and "save_pretrained" in str(err.value)
    assert not marker.exists()


def test_corrupt_pickle_file_and_missing_weights_are_named(tiny_model_dir, tmp_path):
    model = copy_of(tiny_model_dir, tmp_path / "m")
    to_pickle_only(model)
    weights = model / "pytorch_model.bin"
    weights.write_bytes(weights.read_bytes()[:300])
    with pytest.raises(ModelError, match=f"{weights}: not a readable PyTorch weight file"):
        load_causal_lm(model)
    weights.unlink()
    with pytest.raises(ModelError, match=f"{model} has no weights \\(model.safetensors or pytorch_model.bin\\)"):
        load_causal_lm(model)


def test_sharded_index_naming_a_missing_shard(tiny_model_dir, tmp_path):
    model = copy_of(tiny_model_dir, tmp_path / "m")
    state = load_file(model / "model.safetensors")
    keys = sorted(state)
    save_file({k: state[k] for k in keys[:3]}, model / "model-00001-of-00002.safetensors")
    (model / "model.safetensors").unlink()
    index = {"metadata": {}, "weight_map": {k: f"model-0000{1 + (i >= 3)}-of-00002.safetensors" for i, k in enumerate(keys)}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelError, match="names shard model-00002-of-00002.safetensors, which is missing"):
        load_causal_lm(model)


# --- as a user meets them: `posttrain train` -----------------------------------------------------


def test_train_with_a_truncated_safetensors_exits_2_naming_it(tmp_path):
    overrides = tiny_run(tmp_path)
    weights = tmp_path / "model" / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    out = posttrain("train", str(write_config(tmp_path)), *overrides, cwd=tmp_path)
    assert_user_error(out, f"{weights}: truncated:", "copy it again")


def test_train_with_a_config_json_that_does_not_fit_the_weights_exits_2(tmp_path):
    overrides = tiny_run(tmp_path)
    edit_config(tmp_path / "model", intermediate_size=40)
    out = posttrain("train", str(write_config(tmp_path)), *overrides, cwd=tmp_path)
    assert_user_error(out, "mlp.down_proj.weight has shape", "config.json")


def test_train_from_a_pickle_only_directory_runs_and_a_code_carrying_one_is_refused(tmp_path):
    overrides = tiny_run(tmp_path)
    to_pickle_only(tmp_path / "model")
    out = posttrain("train", str(write_config(tmp_path)), *overrides, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "run" / "final_model" / "model.safetensors").is_file()
    weights = tmp_path / "model" / "pytorch_model.bin"
    torch.save({**torch.load(weights, weights_only=True), "extra": Payload(tmp_path / "ran")}, weights)
    out = posttrain("train", str(write_config(tmp_path)), *overrides, "trainer.default_local_dir=run2", cwd=tmp_path)
    assert_user_error(out, f"{weights}: holds Python objects besides tensors")
    assert not (tmp_path / "ran").exists()
