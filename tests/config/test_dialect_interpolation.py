"""Hydra and OmegaConf features that real verl/ROLL/Trinity-RFT configs use (posttrain.config.dialects.source)."""

import re
import time

from posttrain.config.dialects import read_foreign


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_includes_packages_and_interpolations(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLL_TEST_LR", "3e-6")
    monkeypatch.delenv("ROLL_TEST_UNSET", raising=False)
    write(tmp_path / "config" / "common.yaml", "seed: 7\nresponse_length: 64\n")
    write(tmp_path / "config" / "gen" / "sampled.yaml", "temperature: 0.5\n")
    main = write(tmp_path / "exp" / "rlvr.yaml", """\
defaults:
  - ../config/common@_here_
  - ../config/gen/sampled@generation
  - _self_
exp_name: demo-${now:%Y}
pretrain: ${oc.env:ROLL_TEST_UNSET,/models/qwen}
rollout_batch_size: 8
prompt_length: ${oc.select:generation.missing_key,32}
seed: 11
actor_train:
  training_args:
    learning_rate: ${oc.decode:${oc.env:ROLL_TEST_LR}}
actor_infer:
  generating_args:
    temperature: ${generation.temperature}
    max_new_tokens: ${response_length}
""")
    foreign = read_foreign(main, "roll")
    native = foreign.native
    assert native["trainer"]["experiment_name"] == f"demo-{time.strftime('%Y')}"  # Hydra's now resolver
    assert native["model"]["path"] == "/models/qwen"  # oc.env default
    assert native["actor"]["optim"]["lr"] == 3e-6  # oc.env set (a string: oc.decode reads it as YAML)
    assert native["data"]["max_prompt_length"] == 32  # oc.select default
    assert native["rollout"]["temperature"] == 0.5  # an included package, interpolated
    assert native["data"]["max_response_length"] == 64  # from the include under the root
    assert not foreign.report.refused


def test_missing_environment_variable_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("TRINITY_TEST_MODEL", raising=False)
    path = write(tmp_path / "t.yaml", "model:\n  model_path: ${oc.env:TRINITY_TEST_MODEL}\nalgorithm:\n  algorithm_type: grpo\n")
    entry = read_foreign(path, "trinity").report.entry("model.model_path")
    assert entry.status == "refused"
    assert "\n" not in entry.reason
    assert re.match(r"environment variable TRINITY_TEST_MODEL is not set .*export TRINITY_TEST_MODEL=\.\.\., "
                    r"or give the file a default: \$\{oc.env:TRINITY_TEST_MODEL,DEFAULT\}", entry.reason), entry.reason


def test_an_unknown_resolver_is_refused_on_its_key_only(tmp_path):
    path = write(tmp_path / "r.yaml", "pretrain: /m\nrollout_batch_size: ${eval:'4*2'}\nprompt_length: 16\n")
    foreign = read_foreign(path, "roll")
    assert [e.key for e in foreign.report.refused] == ["rollout_batch_size"]
    assert "eval" in foreign.report.refused[0].reason
    assert foreign.native["data"]["max_prompt_length"] == 16
