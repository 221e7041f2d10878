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
