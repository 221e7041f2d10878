"""rollout.name picks the engine from the registry; a machine that cannot run it is told in one line
at plan time; settings of engines that are not running are accepted and named once as unused."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

from posttrain.cli import main
from posttrain.config import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.rollout import HFEngine
from posttrain.rollout.engines import ENGINE_SETTINGS, build_engine, check_engine_machine
from posttrain.rollout.registry import ENGINES, engine_builder, register_engine
from posttrain.tasks import write_task_data
from test_vllm_adapter import FakeLLM, FakeSamplingParams


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=16, test=4)
    return root


def plan_args(root, *overrides):
    return ["config", "plan", f"model.path={root}/model", f"data.train_files={root}/data/train.parquet",
            "data.train_batch_size=4", "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4", *overrides]


def test_the_registry_is_a_dict_that_refuses_duplicates_and_lists_the_valid_names():
    assert set(ENGINES) == {"hf", "vllm", "sglang", "external"}
    with pytest.raises(ValueError, match="registered twice"):
        register_engine("hf")(lambda *a, **k: None)
    with pytest.raises(ConfigError, match="no such rollout engine; valid: external, hf, sglang, vllm"):
        engine_builder("trtllm")


def test_rollout_name_picks_the_engine_and_plan_names_what_the_machine_lacks(assets, tiny_lm, monkeypatch, capsys):
    tokenizer = SimpleNamespace(pad_token_id=0)
    hf = build_engine(load_config(None, ["rollout.max_num_seqs=3"]), tiny_lm, tokenizer, seed=4)
    assert isinstance(hf, HFEngine) and (hf.seed, hf.max_num_seqs) == (4, 3)
    # this machine has neither vLLM nor a GPU: plan says so in one line, before loading anything
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert main(plan_args(assets, "rollout.name=vllm")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("posttrain: error: rollout.name=vllm: vLLM is not installed (pip install 'posttrain[vllm]')")
    assert "Use rollout.name=hf on this machine" in err[0]
    # with vLLM (a stand-in) and a GPU the same name builds the vllm engine
    fake = types.ModuleType("vllm")
    fake.__version__, fake.LLM, fake.SamplingParams = "0.20.0", FakeLLM, FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = load_config(None, [f"model.path={assets}/model", "rollout.name=vllm"])
    check_engine_machine(cfg)
    engine = build_engine(cfg, tiny_lm, tokenizer, seed=4)
    assert type(engine).__name__ == "VLLMEngine" and engine.llm.kwargs["model"] == f"{assets}/model"


def test_settings_of_another_engine_plan_on_cpu_and_are_named_once(assets, capsys):
    assert main(plan_args(assets, "rollout.gpu_memory_utilization=0.9", "rollout.enforce_eager=false",
                          "rollout.engine_kwargs.vllm={swap_space: 4}", "rollout.max_num_seqs=64")) == 0
    out = capsys.readouterr().out.splitlines()
    notes = [line for line in out if line.startswith("note:")]
    assert notes == ["note: rollout.gpu_memory_utilization, rollout.enforce_eager, rollout.engine_kwargs.vllm.swap_space: "
                     "settings of another rollout engine, unused by the hf engine this run uses (rollout.name=hf)"]
    assert main(plan_args(assets)) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert set(ENGINE_SETTINGS) <= set(vars(load_config(None).rollout))
