"""Which stored batch the trainer reads next when the buffer replays (Trinity-RFT's priority queue).

Without replay the trainer reads batch s at step s, each once. With
`buffer.trainer_input.experience_buffer.replay_buffer.enable` the buffer is a priority queue over
the stored batches, as Trinity-RFT's `AsyncPriorityQueue`:

- priority = policy_step - decay x use_count (`linear_decay`), the policy step being the trainer
  step whose weights sampled the batch (Trinity's model_version): fresh batches first, each reuse
  lowering a batch's rank; `decay_limit_randomization` adds Gaussian noise of std `sigma` (seeded by
  step and batch, so a rerun picks the same) and retires a batch once used `use_count_limit` times;
- a batch read once may be read again only `reuse_cooldown_time` seconds after its last read; null
  never reuses (a priority queue of fresh batches);
- at most `capacity` prompt groups stay usable: when more are, the lowest-priority batches are
  evicted for good (Trinity drops the lowest item of a full queue);
- ties go to the older batch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from posttrain.config.sections.buffer import PRIORITY_FN_ALIASES, PRIORITY_FNS, priority_args

@dataclass(frozen=True)
class Replay:
    """The replay settings of one buffer (None of them read when `enable` is off)."""

    enable: bool = False
    priority_fn: str = "linear_decay"
    args: dict[str, float] = field(default_factory=lambda: dict(PRIORITY_FNS["linear_decay"]))
    reuse_cooldown_s: float | None = None
    capacity_groups: int = 10000


class Stored(NamedTuple):
    """What the buffer knows of one stored batch."""

    batch: int
    policy_step: int
    groups: int  # prompt groups in the batch (Trinity-RFT's queue items)
    use_count: int  # steps that trained on it so far
    last_used: float | None  # wall time of its last read


def replay_from_config(buffer: Any) -> Replay:
    """The replay settings of a `buffer.trainer_input.experience_buffer` config section."""
    r = buffer.replay_buffer
    fn = PRIORITY_FN_ALIASES.get(r.priority_fn, r.priority_fn)
    return Replay(r.enable, fn, priority_args(fn, dict(r.priority_fn_args)), r.reuse_cooldown_time, buffer.capacity)


def priority(item: Stored, replay: Replay) -> float:
    """The batch's priority (higher is read first); noise is keyed by (batch, use_count)."""
    value = item.policy_step - replay.args["decay"] * item.use_count
    sigma = replay.args.get("sigma", 0.0)
    if sigma > 0:
        value += random.Random(f"posttrain-replay:{item.batch}:{item.use_count}").gauss(0.0, sigma)
    return value


def _usable(item: Stored, replay: Replay, now: float) -> bool:
    limit = replay.args.get("use_count_limit", 0)
    if limit > 0 and item.use_count >= limit:
        return False  # retired (decay_limit_randomization)
    if item.use_count == 0:
        return True
    if replay.reuse_cooldown_s is None:
        return False  # no reuse
    return item.last_used is not None and now - item.last_used >= replay.reuse_cooldown_s


def pick(items: list[Stored], replay: Replay, now: float) -> tuple[int | None, list[int]]:
    """(batch to read next or None when none is usable now, batches to evict for good).

    The usable batches are ranked by priority (ties: older batch first); those past `capacity`
    prompt groups in that order are evicted, the first is read.
    """
    ranked = sorted((i for i in items if _usable(i, replay, now)), key=lambda i: (-priority(i, replay), i.batch))
    kept, groups = [], 0
    for item in ranked:
        if kept and groups + item.groups > replay.capacity_groups:
            break
        kept.append(item)
        groups += item.groups
    evicted = [i.batch for i in ranked[len(kept):]]
    return (kept[0].batch if kept else None), evicted
