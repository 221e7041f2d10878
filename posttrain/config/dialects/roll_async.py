"""ROLL's ``async_generation_ratio`` onto posttrain's decoupled explorer and trainer.

What ROLL does with it (roll/distributed/scheduler/generate_scheduler.py, ``ReplayBuffer``; the
agentic ``GroupQueue`` of rollout_scheduler.py does the same per environment group):

- Generation may run ``ratio`` batches ahead: at its first step the scheduler lets
  ``ceil(batch_size x ratio) + batch_size`` prompts start, and each later step ``batch_size`` more.
- A prompt belongs to the step at which it started. Step ``g`` trains on the finished prompts of
  steps ``g - ceil(ratio)`` .. ``g``, oldest first; prompts of older steps are dropped (``gc``). So
  every sample is at most ``ceil(ratio)`` weight updates older than the weights that train it.
- A fractional ratio takes only ``int(samples x (ratio % 1))`` samples from the oldest allowed step
  (``get_batch``), so the stalest part of a batch is a fraction of it.
- 0 is the synchronous pipeline (pause sampling after every batch, drop what is left).

posttrain's decoupled run (docs/async.md) has the same contract in whole batches: with
``synchronizer.sync_interval`` 1 the explorer may sample batch ``b`` once the weights of step
``b - 1 - sync_offset`` exist, so it runs ``sync_offset`` batches ahead and a batch is at most
``sync_offset`` steps stale. A whole ratio ``k`` is therefore ``sync_offset: k``. One difference
remains and is stated in the translation: when weights change under a half-generated response,
ROLL's vLLM path resumes it with the new weights (``collect_unfinished``, a partial rollout), where
posttrain samples each batch whole with one weights version; the staleness bound is the same.
A fractional ratio has no whole-batch counterpart and is refused.
"""

from __future__ import annotations

import math
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

KEY = "async_generation_ratio"
_FRACTION = ("ROLL takes only that fraction of a batch from the oldest step it allows and the rest from newer ones "
             "(its scheduler's get_batch); posttrain's explorer hands the trainer whole batches, each sampled by one "
             "weights version, so the lag it bounds (synchronizer.sync_offset) is a whole number of batches: use 0 "
             "(synchronous) or a whole number")
_WHOLE = ("ROLL lets generation run {k} batch(es) ahead and trains no sample more than {k} weight update(s) old: a decoupled "
          "explorer and trainer (trainer.mode both) with the explorer up to {k} batch(es) ahead (sync_interval 1 + "
          "sync_offset {k}); ROLL resumes a response cut by a weight update under the new weights, posttrain samples "
          "every response of a batch with one weights version")


def async_generation(ctx: Context) -> None:
    if not ctx.has(KEY):
        return
    ctx.consume(KEY)
    value = ctx.get(KEY)
    if value is None or (_is_number(value) and value == 0):
        ctx.drop(KEY, "0: ROLL's synchronous pipeline, posttrain's default loop")
        return
    if not _is_number(value) or value < 0:
        ctx.refuse(KEY, f"expected a number >= 0 (batches generated ahead), got {value!r}", "synchronizer.sync_offset", value)
    elif value % 1:
        ctx.refuse(KEY, f"{value!r} is a fraction of a batch: {_FRACTION}", "synchronizer.sync_offset", value)
    else:
        k = int(value)
        ctx.set("synchronizer.sync_offset", k, KEY, _WHOLE.format(k=k))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


RULES: dict[str, Rule] = {
    KEY: Rule("synchronizer.sync_offset", "a whole number k: a decoupled run whose explorer samples up to k batches ahead "
              "(sync_offset k, so no batch is more than k steps stale, ROLL's bound); 0: the synchronous loop; a fraction "
              "is refused (ROLL takes that fraction of a batch from the oldest step, posttrain lags in whole batches)", 1),
}
HANDLERS = [async_generation]
