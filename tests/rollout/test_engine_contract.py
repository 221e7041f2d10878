"""Every rollout engine passes the contract of docs/engines.md (tests/rollout/engine_contract.py).

The hf engine runs it on CPU here. vLLM and SGLang run it where they import and CUDA is present
(the GPU machine); elsewhere they are not collected, and one test skips naming the engines left out,
so a green CPU run says nothing about them.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from transformers import AutoModelForCausalLM

from engine_contract import CHECKS, EngineCase
from posttrain.config import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.models.tokenizer import build_tiny_tokenizer
from posttrain.rollout import HFEngine


def _skip_reason(name: str) -> str | None:
    if name == "hf":
        return None
    if importlib.util.find_spec(name) is None:
        return f"{name} is not installed (pip install 'posttrain[{name}]')"
    if not torch.cuda.is_available():
        return f"{name} needs a CUDA GPU"
    return None


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    dirs = []
    for seed in (0, 1):
        path = make_tiny_model(root / f"m{seed}", layers=2, hidden=32, heads=4, seed=seed)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        with torch.no_grad():  # a random tiny model is near-uniform; a sharper head lets temperature show
            model.lm_head.weight.mul_(30.0)
        model.save_pretrained(path)
        dirs.append(path)
    return dirs


def _load(path, device):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()


GPU_ENGINES = ("vllm", "sglang")
RUNNABLE = ["hf"] + [name for name in GPU_ENGINES if _skip_reason(name) is None]


def test_every_gpu_engine_runs_the_contract_here():
    left_out = [_skip_reason(name) for name in GPU_ENGINES if name not in RUNNABLE]
    if left_out:
        pytest.skip("; ".join(left_out))


@pytest.fixture(scope="module", params=RUNNABLE)
def case(request, model_dirs):
    name = request.param
    tokenizer = build_tiny_tokenizer()
    device = "cpu" if name == "hf" else "cuda"
    actor, other = _load(model_dirs[0], device), _load(model_dirs[1], device)
    if name == "hf":
        def make():
            return HFEngine(actor, pad_token_id=tokenizer.pad_token_id, copy_weights=True, tokenizer=tokenizer, seed=0)
        return EngineCase(name, make, actor, other, tokenizer, atol=1e-5)
    from posttrain.rollout.engines import build_engine

    cfg = load_config(None, [
        f"model.path={model_dirs[0]}", f"rollout.name={name}", "rollout.load_format=auto", "rollout.enforce_eager=true",
        "rollout.gpu_memory_utilization=0.3", "data.max_prompt_length=16", "data.max_response_length=16",
    ])
    engines = []

    def make():
        if not engines:  # one GPU engine per module: a second one would not fit beside it
            engines.append(build_engine(cfg, actor, tokenizer, seed=0))
        engine = engines[0]
        engine.update_weights(actor, version=0)  # back to the first weights (a check may have changed them)
        return engine
    return EngineCase(name, make, actor, other, tokenizer, atol=2e-2)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_engine_keeps_the_contract(case, check):
    check(case)
