"""Progress bars (tqdm) for long phases, on an interactive terminal only.

When standard output is a terminal, the stage's training steps show as a bar with the stage's ETA
(the mean step time so far times the steps left, as on the console line), the per-step console
lines print above it, and a validation pass over many batches gets a bar of its own that disappears
when done. When standard output is a file or a pipe (logs, CI, tests) nothing changes: one line per
logged step. Only the process that logs (rank 0) builds bars. tqdm's own ``TQDM_DISABLE=1`` turns
them off.
"""

from __future__ import annotations

import sys
from typing import Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")


def interactive(stream: TextIO | None = None) -> bool:
    """Whether `stream` (standard output by default) is a terminal a person watches."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class StageBar:
    """The stage's steps as one bar; `write` prints a line above it without breaking it."""

    def __init__(self, total: int, stream: TextIO, label: str | None = None, initial: int = 0):
        from tqdm import tqdm

        # smoothing=0: the rate is the stage's mean so far (steps done in this process / time), so
        # the remaining time is the same estimate as the console line's eta, not a recent-steps one.
        self.bar = tqdm(total=total, initial=initial, file=stream, desc=label or "train", unit="step",
                        smoothing=0, dynamic_ncols=True, leave=True)

    def update(self, step: int) -> None:
        """Move to stage-local `step` (steps already counted are not counted again)."""
        if step > self.bar.n:
            self.bar.update(step - self.bar.n)

    def write(self, line: str) -> None:
        self.bar.write(line, file=self.bar.fp)

    def close(self) -> None:
        self.bar.close()


def phase(items: Iterable[T], total: int, desc: str, enabled: bool = True) -> Iterable[T] | Iterator[T]:
    """`items` with a transient bar on an interactive terminal (`enabled`: this process logs)."""
    if not (enabled and interactive()) or total <= 1:
        return items
    from tqdm import tqdm

    return tqdm(items, total=total, desc=desc, unit="batch", leave=False, file=sys.stdout, dynamic_ncols=True)
