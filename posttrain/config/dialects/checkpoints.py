"""One count of checkpoints kept for every role, as ROLL (``max_ckpt_to_keep``), Trinity-RFT
(``trainer.max_checkpoints_to_keep``) and verl's deprecated ``remove_previous_ckpt_in_save`` (1)
write it: posttrain's actor and critic counts."""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context

COUNTS = ("trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep")


def keep_newest(ctx: Context, key: str, keep_all: tuple[Any, ...], reason: str) -> None:
    """``key``'s count as both of posttrain's; a value of ``keep_all`` keeps every checkpoint (dropped)."""
    if not ctx.has(key):
        return
    ctx.consume(key)
    value = ctx.get(key)
    if value in keep_all:
        ctx.drop(key, f"{value!r}: every checkpoint is kept, as posttrain keeps them by default")
    elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
        ctx.refuse(key, f"expected a whole number of checkpoints of at least 1 (or {' or '.join(map(repr, keep_all))} to keep all), "
                        f"got {value!r}", COUNTS[0], value)
    else:
        set_counts(ctx, value, key, reason)


def set_counts(ctx: Context, value: int, key: str, reason: str) -> None:
    """Both of posttrain's counts to ``value``, from foreign ``key``."""
    for native in COUNTS:
        ctx.set(native, value, key, reason)
