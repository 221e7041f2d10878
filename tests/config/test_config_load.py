"""Loading YAML, dotted overrides, interpolation, and writing the resolved config back."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from posttrain.config import Derived, load_config, load_raw, save_resolved, to_dict, to_yaml
from posttrain.config.fields import param, section
from posttrain.errors import ConfigError


@section
class Inner:
    """Toy inner section."""

    a: int = param(1, doc="A.")
    b: int = param(2, doc="B.")
    name: str = param("x", doc="Name.")
    items: list[int] = param(factory=list, doc="Items.")


@section
class Root:
    """Toy root."""

    inner: Inner = param(factory=Inner, doc="Inner.")
    ratio: float = param(0.5, doc="Ratio.")
    flag: bool = param(False, doc="Flag.")
    maybe: int | None = param(3, doc="Maybe.")


def write(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_yaml_then_overrides_with_yaml_typed_values(tmp_path):
    path = write(tmp_path, "inner:\n  a: 5\nratio: 0.25\n")
    cfg = load_config(path, ["inner.b=7", "flag=true", "inner.items=[1,2]", "maybe=null", "ratio=1e-3"], Root)
    assert (cfg.inner.a, cfg.inner.b, cfg.flag, cfg.inner.items, cfg.maybe, cfg.ratio) == (5, 7, True, [1, 2], None, 1e-3)


def test_empty_override_value_means_null(tmp_path):
    assert load_config(None, ["maybe="], Root).maybe is None


def test_no_file_starts_from_defaults():
    assert load_config(None, [], Root) == Root()


def test_malformed_override_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["inner.a"], Root)
    assert str(info.value) == (
        "invalid configuration: override 'inner.a': expected KEY=VALUE with a dotted key, e.g. "
        "actor.ppo_epochs=2 (no spaces around '='; an empty value means null)"
    )


def test_missing_file_and_bad_yaml_name_the_file_and_line(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: config file not found"):
        load_config(tmp_path / "nope.yaml", [], Root)
    path = write(tmp_path, "inner:\n  a: [1, 2\nratio: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, [], Root)
    assert f"{path}: line 3, column" in str(info.value) and "invalid YAML" in str(info.value)


def test_top_level_list_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="the top level must be a mapping of sections"):
        load_config(write(tmp_path, "- 1\n- 2\n"), [], Root)


def test_interpolation_can_point_at_a_default_the_user_did_not_write(tmp_path):
    cfg = load_config(write(tmp_path, "inner:\n  a: ${inner.b}\n"), ["inner.b=9"], Root)
    assert cfg.inner.a == 9


def test_env_interpolation_with_default(tmp_path, monkeypatch):
    path = write(tmp_path, "inner:\n  name: ${oc.env:POSTTRAIN_TEST_NAME,fallback}\n")
    monkeypatch.delenv("POSTTRAIN_TEST_NAME", raising=False)
    assert load_config(path, [], Root).inner.name == "fallback"
    monkeypatch.setenv("POSTTRAIN_TEST_NAME", "from_env")
    assert load_config(path, [], Root).inner.name == "from_env"


def test_missing_env_variable_suggests_a_default(monkeypatch):
    monkeypatch.delenv("POSTTRAIN_TEST_NOPE", raising=False)
    with pytest.raises(ConfigError) as info:
        load_config(None, ["inner.name=${oc.env:POSTTRAIN_TEST_NOPE}"], Root)
    assert str(info.value).startswith("invalid configuration: inner.name: cannot resolve interpolation")
    assert str(info.value).endswith("; set it, or give a default: ${oc.env:NAME,default}")


def test_interpolation_error_names_the_key(tmp_path):
    path = write(tmp_path, "inner:\n  a: ${inner.nope}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, [], Root)
    assert str(info.value).startswith(f"invalid configuration: {path}: inner.a: cannot resolve interpolation")


def test_replacing_a_section_with_a_list_is_a_validation_error_not_a_crash(tmp_path):
    with pytest.raises(ConfigError, match=r"inner: expected a mapping of Inner keys, got \[1\]"):
        load_config(write(tmp_path, "inner: [1]\n"), [], Root)


def test_load_raw_is_the_resolved_plain_dict(tmp_path):
    raw = load_raw(write(tmp_path, "inner:\n  a: ${inner.b}\n"), ["extra=1"], Root)
    assert raw == {"inner": {"a": 2, "b": 2, "name": "x", "items": []}, "ratio": 0.5, "flag": False, "maybe": 3, "extra": 1}


def test_yaml_round_trip_and_save_resolved(tmp_path):
    cfg = load_config(None, ["inner.a=4", "inner.items=[1]"], Root)
    assert yaml.safe_load(to_yaml(cfg)) == to_dict(cfg)
    derived = Derived(10, 2, 4, 0, 0, 1024, 1)
    target = save_resolved(cfg, tmp_path / "run", derived)
    assert target == tmp_path / "run" / "config.yaml"
    text = target.read_text()
    assert "#   total_training_steps: 4" in text
    assert load_config(target, [], Root) == cfg  # the saved file loads back to the same config
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.yaml"]  # no temp file left


def test_real_schema_loads_with_overrides():
    cfg = load_config(None, ["data.train_batch_size=4", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2"])
    assert cfg.data.train_batch_size == 4
    assert dataclasses.is_dataclass(cfg) and to_dict(cfg)["actor"]["ppo_mini_batch_size"] == 2


def test_validation_problems_name_the_config_file_or_the_command_line(tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text("actor:\n  optim:\n    lr: fast\n  ppo_epochs: 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, ["rollout.n=0"])
    assert sorted(tuple(p.split(": ")[:2]) for p in info.value.problems) == sorted([
        (str(path), "actor.optim.lr"),
        (str(path), "actor.ppo_epochs"),
        ("command line override 'rollout.n=0'", "rollout.n"),
    ])
    assert f"  - {path}: actor.optim.lr: expected a number, got 'fast'" in str(info.value).splitlines()
