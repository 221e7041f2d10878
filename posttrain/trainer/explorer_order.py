"""Where a decoupled explorer's data order stands after a restart.

The explorer resumes after the last batch in the buffer. A sampler whose order is fixed when it is
built (posttrain's shuffle, the fixed-order task selectors) gets there by drawing that many batches
again. One that learns from the rewards (`data.selector.type: difficulty_based`, a `data.sampler`
class with update and state_dict) would draw other rows without the feedback, so the explorer saves
its state after each batch is explored, before the batch is written: the file keeps the states
after batches b - 1 and b, so whichever of them the buffer ends at (a crash before or after the
write) is there to load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posttrain.files import atomic_write_text

STATE_FILE = "sampler_state.json"


def learns(sampler: Any) -> bool:
    """Whether the sampler's order depends on the feedback it gets (replaying draws is not exact)."""
    return bool(getattr(sampler, "adaptive", False))


class OrderLog:
    """The states after the last two explored batches, in `<explorer dir>/sampler_state.json`."""

    def __init__(self, path: Path, sampler: Any, start: int):
        self.path, self.sampler = path, sampler
        self.states: dict[str, Any] = {str(start): sampler.state_dict()}

    def explored(self, batch: int) -> None:
        self.states = {k: v for k, v in self.states.items() if int(k) == batch - 1}
        self.states[str(batch)] = self.sampler.state_dict()
        atomic_write_text(self.path, json.dumps({"states": self.states}))


def restore_order(sampler: Any, path: Path, start: int, drawn: int | None = None) -> None:
    """Put `sampler` where it stood after batch `start`: its saved state when it learns from
    feedback and the file has that batch's, else by drawing again the `drawn` prompt batches taken
    through it (`start` of them unless dynamic sampling took more)."""
    if learns(sampler) and path.exists():
        state = json.loads(path.read_text()).get("states", {}).get(str(start))
        if state is not None:
            sampler.load_state_dict(state)
            return
    for _ in range(start if drawn is None else drawn):
        sampler.next_batch()
