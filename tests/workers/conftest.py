"""Fixtures for the worker tests: one tiny Qwen2 directory per session, fresh modules per test.

Helpers live in tests/worker_helpers.py (importable from every test folder).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from posttrain.models.loading import load_value_model
from posttrain.models.tiny import make_tiny_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", layers=2, hidden=32, heads=4, seed=0)


@pytest.fixture
def policy(model_dir):
    """A fresh fp32 policy (train mode, as the actor holds it)."""
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()


@pytest.fixture
def value_model(model_dir):
    """A fresh critic: the tiny body with a one-output token head seeded from the global RNG."""
    torch.manual_seed(0)
    return load_value_model(model_dir)
