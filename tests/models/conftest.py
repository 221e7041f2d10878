"""Shared fixtures for model tests.

`tiny_model_dir` is the fixture to hoist into tests/conftest.py: one default tiny model per test
session (building one takes ~20 ms, loading ~30 ms), which tests must treat as read-only.
"""

from pathlib import Path

import pytest

from posttrain.models.tiny import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A default tiny Qwen2 model + tokenizer directory (seed 0). Do not write into it."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny_model"), seed=0)

