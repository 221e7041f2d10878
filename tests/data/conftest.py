"""Fixtures for the data tests (helpers live in data_helpers.py, a name no other test folder uses)."""

from __future__ import annotations

import pytest

from posttrain.models.tiny import build_tiny_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    """Character-level ChatML tokenizer: printable char c has id ord(c) - 27, '\\n' is 4,
    <|endoftext|> (pad) 0, <|im_start|> 1, <|im_end|> 2."""
    return build_tiny_tokenizer()
