"""Two of ROLL's batch sizes that posttrain counts differently.

- ``max_tokens_per_microbatch_in_train`` / ``_in_infer`` count a whole micro-batch's tokens, while
  posttrain's token budgets count one device's share of a micro-batch split over the role's Ulysses
  ranks (as verl's ``*_max_token_len_per_gpu``): `per_device_budget`.
- An agentic pipeline pads a step smaller than the optimizer batch to one optimizer batch (its
  ``adjust_batch``): `padded_step` says what posttrain does instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects.translate import Context


def per_device_budget(ctx: Context, key: str, value: Any) -> Any:
    """ROLL's budget counts a micro-batch's tokens; posttrain's counts one device's share, the
    micro-batch being split over the role's Ulysses ranks (ulysses_size, or CP under megatron, which
    posttrain runs as Ulysses): the micro-batch budget stays ROLL's (rounded down to a multiple)."""
    role = key.partition(".")[0]
    strategy = ctx.get(f"{role}.strategy_args.strategy_name")
    config = ctx.get(f"{role}.strategy_args.strategy_config") or {}
    split = (config.get("context_parallel_size", 1) if strategy == "megatron_train" and isinstance(config, Mapping)
             else ctx.get(f"{role}.model_args.ulysses_size") or 1)
    if not (isinstance(value, int) and isinstance(split, int) and split > 1):
        return value
    return max(1, value // split)


def padded_step(step: int, optimizer_batch: int, why: str) -> str:
    """ROLL's agentic pipeline (adjust_batch) pads a step's batch smaller than the optimizer batch with
    copies of its own rows up to a multiple of it, then takes one optimizer step: posttrain takes
    that one step over the step's rows. At twice the step's size every row is copied once, which
    changes no mean-aggregated loss (token-sum doubles); otherwise ROLL's copies, drawn at random,
    weigh some rows more."""
    exact = ("every row copied once: the same loss under a mean aggregation, twice it under token-sum" if optimizer_batch == 2 * step
             else "ROLL's randomly drawn copies weigh some rows more; posttrain weighs every row once")
    return (f"{why} = {optimizer_batch} is more than the step's rollout_batch_size {step}: ROLL pads the step with copies of its rows "
            f"to one optimizer step (batch_adjust_mode), so one optimizer step per step, over its {step} rows ({exact})")
