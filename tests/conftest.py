"""Fixtures every test folder may use (built locally, nothing downloaded)."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


@pytest.fixture
def tiny_lm() -> Qwen2ForCausalLM:
    """A tiny random Qwen2 in eval mode (fp32, fixed seed), fresh per test."""
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64,
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(autouse=True)
def _dialects_on_a_machine_without_gpus(request, monkeypatch):
    """A foreign file that leaves its per-node device count to the machine is translated as on a
    machine without GPUs wherever the suite runs (posttrain.config.dialects.machine), so that the
    translations tests expect do not change on a GPU node; a test that asks for the `machine_gpus`
    fixture (tests/config/test_machine_devices.py) sets the count itself."""
    if "machine_gpus" not in request.fixturenames:
        monkeypatch.setattr("posttrain.config.dialects.machine.visible_gpus", lambda: 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a `slow` test run first. The suite runs two files at a time (pytest-xdist,
    `--dist loadfile`, in the order collected): starting the minute-long end-to-end files first
    keeps one of them from being the last thing running while the other process sits idle."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: each file keeps its order
