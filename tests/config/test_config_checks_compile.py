"""`actor.use_torch_compile`: honoured by RL stages, refused where it would do nothing."""

from __future__ import annotations

import pytest

from posttrain.config import load_config
from posttrain.errors import ConfigError


def test_use_torch_compile_is_refused_for_sft_and_accepted_for_rl():
    with pytest.raises(ConfigError, match="actor.use_torch_compile is not implemented for algorithm.kind sft"):
        load_config(None, ["algorithm.kind=sft", "actor.use_torch_compile=true"])
    assert load_config(None, ["actor.use_torch_compile=true"]).actor.use_torch_compile is True
