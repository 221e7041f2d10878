"""render_mode: rgb_array of the built-in grid games: every cell of the picture is its text symbol's tile."""

from __future__ import annotations

import numpy as np
import pytest

from posttrain.envs import frozen_lake, sokoban
from posttrain.envs.grid_image import CELL


def assert_drawn(image: np.ndarray, text_map: str, tiles) -> None:
    rows = text_map.split("\n")
    assert image.shape == (len(rows) * CELL, len(rows[0]) * CELL, 3) and image.dtype == np.uint8
    for r, row in enumerate(rows):
        for c, symbol in enumerate(row):
            tile = tiles[symbol]
            corner, centre = image[r * CELL, c * CELL].tolist(), image[r * CELL + CELL // 2, c * CELL + CELL // 2].tolist()
            assert centre == list(tile.colour) and corner == list(tile.on or tile.colour), (r, c, symbol)


@pytest.mark.parametrize("make,module,action", [
    (lambda mode: sokoban.Sokoban(dim_room=(6, 6), render_mode=mode), sokoban, "Left"),
    (lambda mode: frozen_lake.FrozenLake(size=4, is_slippery=False, render_mode=mode), frozen_lake, "Down"),
])
def test_a_picture_shows_the_same_state_as_the_text(make, module, action):
    text, picture = make("text"), make("rgb_array")
    assert_drawn(picture.reset(seed=5), text.reset(seed=5), module.TILES)
    (obs, reward, done, info), (shown, reward2, done2, info2) = text.step(action), picture.step(action)
    assert_drawn(shown, obs, module.TILES)
    assert (reward, done, info) == (reward2, done2, info2) and picture.state() == text.state()


def test_an_unknown_render_mode_is_refused():
    with pytest.raises(ValueError, match="render_mode must be one of text, rgb_array, got 'human'"):
        sokoban.Sokoban(render_mode="human")
