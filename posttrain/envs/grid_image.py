"""Grid games drawn as pictures: a text map (one row per line, one symbol per cell) as an RGB array.

ROLL's vision-language agentic examples build their Sokoban and FrozenLake environments with
``render_mode: rgb_array``, so the policy sees each state as an image instead of the text map.
posttrain's `sokoban` and `frozen_lake` take the same setting and draw their own text map here: each
cell a square of `CELL` pixels in its symbol's colour, a piece that stands on a cell (player, box) a
smaller square on that cell's ground. The pictures are posttrain's own (flat colours, no sprites), so
a policy trained on them learns posttrain's rooms, not ROLL's artwork; the states they show are the
same as the text maps'.

>>> image = draw_grid("#P\\n_O", {"#": Tile((0, 0, 0)), "_": Tile((255, 255, 255)), "O": Tile((255, 0, 0)),
...                                "P": Tile((0, 0, 255), on=(255, 255, 255))})
>>> image.shape, image.dtype.name, image[0, 0].tolist(), image[0, CELL].tolist(), image[CELL // 2, CELL + CELL // 2].tolist()
((32, 32, 3), 'uint8', [0, 0, 0], [255, 255, 255], [0, 0, 255])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CELL = 16  # pixels per cell side: a 6x6 room is 96x96, as ROLL's sprites draw it
RENDER_MODES = ("text", "rgb_array")


@dataclass(frozen=True)
class Tile:
    """How one symbol is drawn: a full cell of `colour`, or a piece of `colour` on a cell of `on`."""

    colour: tuple[int, int, int]
    on: tuple[int, int, int] | None = None


def draw_grid(text_map: str, tiles: dict[str, Tile]) -> np.ndarray:
    """The map as an (rows x CELL, columns x CELL, 3) uint8 RGB array."""
    rows = text_map.split("\n")
    image = np.zeros((len(rows) * CELL, max(len(r) for r in rows) * CELL, 3), dtype=np.uint8)
    inset = CELL // 4
    for r, row in enumerate(rows):
        for c, symbol in enumerate(row):
            tile = tiles[symbol]
            cell = image[r * CELL : (r + 1) * CELL, c * CELL : (c + 1) * CELL]
            if tile.on is None:
                cell[:] = tile.colour
            else:
                cell[:] = tile.on
                cell[inset : CELL - inset, inset : CELL - inset] = tile.colour
    return image


def check_render_mode(render_mode: str) -> str:
    if render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode must be one of {', '.join(RENDER_MODES)}, got {render_mode!r}")
    return render_mode
