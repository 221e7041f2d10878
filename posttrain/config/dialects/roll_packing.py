"""ROLL's sequence packing (``use_sequence_packing`` and ``sequence_packing_args`` of a role).

ROLL (roll/utils/sequence_packing.py, read only by its megatron strategies) concatenates the real
tokens of a micro-batch's sequences into one packed row. ``algorithm: none`` keeps the fixed
micro-batches (per_device_train_batch_size / infer_batch_size rows); ``load_balance`` cuts each
mini-batch into ceil(tokens / max_packed_sequence_length_*) micro-batches (at least
min_num_micro_batches_*), balanced by tokens. Its losses are normalised by the whole batch's tokens,
so the grouping changes speed and memory, not the step.

posttrain's counterparts: ``model.use_remove_padding`` (the policy's forwards on packed real tokens;
``critic.use_remove_padding`` for the critic) and, for ``load_balance``, micro-batches cut by a
token budget (``actor.use_dynamic_bsz`` / ``ppo_max_token_len_per_gpu`` for training,
``rollout.log_prob_*`` for the actor's forwards, ``ref.log_prob_*``, ``critic.*``), whose gradient
accumulation is exact for every cut (posttrain.workers.microbatch). A budget under context
parallelism is one device's share (`roll_budgets.per_device_budget`). min_num_micro_batches_* only
floors the number of micro-batches, which changes no result: dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects import roll_budgets
from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

ARGS = ("algorithm", "max_packed_sequence_length_train", "max_packed_sequence_length_forward",
        "min_num_micro_batches_train", "min_num_micro_batches_forward")
# (role) -> (padding-free field, [(phase, use-dynamic field, budget field)]): the reference never trains.
TARGETS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "actor_train": ("model.use_remove_padding", [("train", "actor.use_dynamic_bsz", "actor.ppo_max_token_len_per_gpu"),
                                                 ("forward", "rollout.log_prob_use_dynamic_bsz", "rollout.log_prob_max_token_len_per_gpu")]),
    "reference": ("model.use_remove_padding", [("forward", "ref.log_prob_use_dynamic_bsz", "ref.log_prob_max_token_len_per_gpu")]),
    "critic": ("critic.use_remove_padding", [("train", "critic.use_dynamic_bsz", "critic.ppo_max_token_len_per_gpu"),
                                             ("forward", "critic.use_dynamic_bsz", "critic.forward_max_token_len_per_gpu")]),
}
_GROUPING = "a floor on the number of micro-batches: it regroups rows, and posttrain's gradient accumulation is exact for every grouping (speed and memory only)"


def _budget(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _role(ctx: Context, role: str) -> None:
    use, args_key = f"{role}.use_sequence_packing", f"{role}.sequence_packing_args"
    if not (ctx.has(use) or ctx.has(args_key)) or {use, args_key} & ctx.handled:  # an SFT file's rule ran (roll_sft)
        return
    ctx.consume(use, args_key)
    on, args = ctx.get(use, False), ctx.get(args_key) or {}
    strategy = ctx.get(f"{role}.strategy_args.strategy_name")
    if on is not True:
        ctx.drop(use if ctx.has(use) else args_key, "sequence packing off (ROLL's default): its arguments are not read")
        return
    if not str(strategy).startswith("megatron"):
        ctx.drop(use, f"ROLL packs sequences only under its megatron strategies; {strategy} does not read use_sequence_packing")
        return
    padding_free, phases = TARGETS[role]
    if not isinstance(args, Mapping) or set(args) - set(ARGS):
        extra = sorted(set(args) - set(ARGS)) if isinstance(args, Mapping) else args
        ctx.refuse(args_key, f"not fields of ROLL's SequencePackingConfig: {extra}", None, args)
        return
    algorithm = args.get("algorithm", "none")
    if algorithm not in ("none", "load_balance"):
        ctx.refuse(args_key, f"algorithm: expected none or load_balance, got {algorithm!r}", None, args)
        return
    ctx.set(padding_free, True, use, "packed sequences without padding tokens")
    if algorithm == "none":
        ctx.drop(args_key, "algorithm none: the fixed micro-batches, packed; ROLL reads no other packing argument")
        return
    for phase, dynamic, budget_field in phases:
        key = f"{args_key}.max_packed_sequence_length_{phase}"
        value = args.get(f"max_packed_sequence_length_{phase}")
        if not _budget(value):
            ctx.refuse(key, f"load_balance needs a token budget > 0 (ROLL asserts it is set), got {value!r}", budget_field, value)
            continue
        why = f"load_balance: micro-batches of at most {value} tokens"
        ctx.set(dynamic, True, key, why)
        ctx.set(budget_field, roll_budgets.per_device_budget(ctx, key, value), key, why + " (one device's share under context parallelism)")
    for phase in ("train", "forward"):
        floor = args.get(f"min_num_micro_batches_{phase}", 1)
        if floor != 1:
            ctx.drop(f"{args_key}.min_num_micro_batches_{phase}", _GROUPING)


def sequence_packing(ctx: Context) -> None:
    for role in TARGETS:
        _role(ctx, role)


RULES: dict[str, Rule] = {
    f"{role}.{key}": Rule(f"{padding_free}, {', '.join(p[2] for p in phases)}",
                          "true under a megatron strategy: packed sequences (padding-free); load_balance: micro-batches by token budget "
                          "(max_packed_sequence_length_*), min_num_micro_batches_* dropped (grouping only); other strategies: dropped",
                          True if key == "use_sequence_packing" else {"algorithm": "load_balance", "max_packed_sequence_length_train": 4096,
                                                                      "max_packed_sequence_length_forward": 4096},
                          ((f"{role}.strategy_args.strategy_name", "megatron_train"),
                           *(((f"{role}.use_sequence_packing", True),) if key == "sequence_packing_args" else ())))
    for role, (padding_free, phases) in TARGETS.items() for key in ("use_sequence_packing", "sequence_packing_args")
}
HANDLERS = [sequence_packing]
