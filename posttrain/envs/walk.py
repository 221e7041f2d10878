"""`walk`: a one-row FrozenLake without holes, small enough for a tiny model to learn on CPU.

The row has `size` cells; the seed places the player ``P`` and the goal ``G`` on two different
cells, the rest are ``_``. Actions are one letter, ``L`` or ``R`` (the first non-space character of
the model's text, either case); anything else is an invalid action: the player stays and
``action_is_valid`` is False, so the env's `format_penalty` applies. Reaching the goal gives reward
1.0, ends the episode and counts as a success.

>>> env = Walk(size=4)
>>> env.reset(seed=0)
'_G_P'
>>> env.step("L")
('_GP_', 0.0, False, {'action_is_valid': True, 'success': False})
>>> env.step("l")
('_P__', 1.0, True, {'action_is_valid': True, 'success': True})
"""

from __future__ import annotations

import random
from typing import Any

from posttrain.envs.registry import register_env


@register_env("walk")
class Walk:
    """A row of `size` cells; move the player onto the goal with L and R."""

    instruction = "Move P to G: answer L or R."

    def __init__(self, size: int = 4):
        if not 2 <= size <= 32:
            raise ValueError(f"size must be between 2 and 32, got {size}")
        self.size = size
        self.player = self.goal = 0

    def reset(self, seed: int) -> str:
        rng = random.Random(seed)
        self.player, self.goal = rng.sample(range(self.size), 2)  # two distinct cells
        return self.render()

    def render(self) -> str:
        cells = ["_"] * self.size
        cells[self.goal] = "G"
        cells[self.player] = "P"  # drawn last: on the goal the player hides it
        return "".join(cells)

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        move = {"L": -1, "R": 1}.get(action_text.strip()[:1].upper())
        if move is None:
            return self.render(), 0.0, False, {"action_is_valid": False, "success": False}
        self.player = min(max(self.player + move, 0), self.size - 1)  # a wall at both ends
        won = self.player == self.goal
        return self.render(), 1.0 if won else 0.0, won, {"action_is_valid": True, "success": won}
