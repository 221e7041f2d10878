"""Trimming a stage's append-only metric files back to the step a resumed run continues after.

A run killed after logging step k+3 but resumed from the checkpoint of step k logs steps k+1..k+3
again; without trimming, metrics.jsonl would hold those steps twice. TensorBoard gets the same
effect from `SummaryWriter(purge_step=...)` (see `posttrain.tracking`), which marks the older
events at or after that step as discarded.
"""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.files import atomic_write_text


def truncate_jsonl(path: Path, keep_through: int) -> int:
    """Keep the lines of `path` whose "step" is <= keep_through (and lines without a step);
    returns how many were dropped. An unparsable last line (a kill mid-write) is dropped too."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            step = json.loads(line).get("step")
        except (json.JSONDecodeError, AttributeError):
            dropped += 1
            continue
        if isinstance(step, int) and step > keep_through:
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        atomic_write_text(path, "".join(f"{line}\n" for line in kept))
    return dropped
