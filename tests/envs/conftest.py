"""Fixtures shared by the environment tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def alfworld_game(tmp_path_factory) -> str:
    """trinity_alfworld's small real game (alfworld's domain and grammar, no download), or a skip
    where the alfworld packages are not installed."""
    for name in ("alfworld", "textworld", "fast_downward"):
        pytest.importorskip(name)
    from posttrain.envs.trinity_alfworld import write_game

    return write_game(str(tmp_path_factory.mktemp("alfworld") / "pick_and_place"))
