"""LoRA keys of ROLL and Trinity-RFT, which are more than one key to one key.

verl's keys (``actor_rollout_ref.model.lora_rank`` ...) are one to one and need no rule here.

- ROLL turns LoRA on with ``<role>.model_args.lora_target``: a comma-separated list of module names,
  ``all-linear``, or a regular expression (a value holding ``*``, ``$``, ``|`` or ``(``). Without it
  ``lora_rank`` (default 8) and ``lora_alpha`` (default twice the rank) are read by nothing.
  ``actor_infer``'s LoRA keys configure vLLM's adapter slots; posttrain's engine receives merged
  weights and has no adapter of its own. ``autocast_adapter_dtype`` (default true: fp32 adapters over
  a bf16 model) is ``autocast_adapter_dtype`` of the role's model section. ``reference``'s LoRA keys
  are read by nothing: ROLL builds adapters only into a model it trains.
- Trinity-RFT's ``model.lora_configs`` is a list of adapters of which Trinity-RFT itself accepts one:
  its ``lora_rank`` (default 32), ``lora_alpha`` (default 32), ``target_modules``,
  ``exclude_modules`` and ``path`` (an adapter to start from) become the ``model.lora_*`` fields.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context

_ROLL_KEYS = ("lora_target", "lora_rank", "lora_alpha", "lora_dropout", "autocast_adapter_dtype")
_ROLL_RANK = 8  # ROLL's default lora_rank
_REGEX_MARKS = ("*", "$", "|", "(")  # ROLL reads a lora_target holding one of these as a regular expression
_MERGED = "posttrain's rollout engine receives the merged weights and holds no adapter of its own"


def roll_targets(value: Any) -> str | list[str]:
    """ROLL's lora_target as posttrain's target_modules (raises ValueError for what has no equivalent).

    >>> roll_targets("q_proj, v_proj")
    ['q_proj', 'v_proj']
    >>> roll_targets("all-linear")
    'all-linear'
    >>> roll_targets(".*attn.*")
    '.*attn.*'
    """
    if not isinstance(value, str):
        raise ValueError(f"expected a comma-separated string of module names, got {value!r}")
    if any(mark in value for mark in _REGEX_MARKS):
        return value
    names = [name.strip() for name in value.split(",") if name.strip()]
    special = [n for n in names if n in ("all-embedding", "all-router")]
    if special:
        raise ValueError(f"{special[0]}: adapters on embeddings or MoE routers are not supported (linear layers only)")
    if "all-linear" in names:
        if len(names) > 1:
            raise ValueError("all-linear mixed with other names; list the module names instead")
        return "all-linear"
    return names


def roll_lora(ctx: Context) -> None:
    for role, native in (("actor_train", "model"), ("critic", "critic.model")):
        prefix = f"{role}.model_args"
        present = {k: ctx.get(f"{prefix}.{k}") for k in _ROLL_KEYS if ctx.has(f"{prefix}.{k}")}
        if not present:
            continue
        ctx.consume(*(f"{prefix}.{k}" for k in present))
        target = present.get("lora_target")
        if target is None:
            for k in present:
                ctx.drop(f"{prefix}.{k}", "LoRA is off in ROLL without lora_target, so nothing reads it")
            continue
        try:
            ctx.set(f"{native}.target_modules", roll_targets(target), f"{prefix}.lora_target")
        except ValueError as err:
            ctx.refuse(f"{prefix}.lora_target", f"not supported: {err}", f"{native}.target_modules", target)
        rank = present.get("lora_rank", _ROLL_RANK)
        alpha = present.get("lora_alpha") or (rank * 2 if isinstance(rank, int) else None)
        rank_key = f"{prefix}.lora_rank" if "lora_rank" in present else f"{prefix}.lora_target"
        ctx.set(f"{native}.lora_rank", rank, rank_key, "" if "lora_rank" in present else f"ROLL's default rank {_ROLL_RANK}")
        alpha_key = f"{prefix}.lora_alpha" if present.get("lora_alpha") else rank_key
        ctx.set(f"{native}.lora_alpha", alpha, alpha_key, "" if present.get("lora_alpha") else "ROLL's default: twice the rank")
        dropout = present.get("lora_dropout")
        if dropout:
            ctx.refuse(f"{prefix}.lora_dropout", "not supported: posttrain's adapters have no dropout (0.0)", None, dropout)
        elif "lora_dropout" in present:
            ctx.drop(f"{prefix}.lora_dropout", "0.0 is what posttrain does: no dropout on the adapters")
        if "autocast_adapter_dtype" in present:
            ctx.set(f"{native}.autocast_adapter_dtype", present["autocast_adapter_dtype"], f"{prefix}.autocast_adapter_dtype")
    _roll_infer(ctx)
    for k in _ROLL_KEYS:
        key = f"reference.model_args.{k}"
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, "ROLL builds adapters only into a model it trains, and the reference is not trained (with "
                          "actor_train's LoRA it computes reference log-probs with the adapter off, as posttrain does)")


def _roll_infer(ctx: Context) -> None:
    """actor_infer's LoRA keys: dropped when actor_train trains an adapter, refused otherwise."""
    trained = ctx.get("actor_train.model_args.lora_target") is not None
    for k in _ROLL_KEYS:
        key = f"actor_infer.model_args.{k}"
        if not ctx.has(key) or key in ctx.handled:
            continue
        ctx.consume(key)
        if k == "autocast_adapter_dtype":
            ctx.drop(key, "read only where ROLL builds a model it trains")
        elif trained or ctx.get(key) is None:
            ctx.drop(key, _MERGED)
        else:
            ctx.refuse(key, "LoRA on the rollout engine alone: posttrain trains an adapter through actor_train.model_args.lora_target", None, ctx.get(key))


# Trinity-RFT LoRAConfig field -> posttrain field
_TRINITY_FIELDS = {
    "lora_rank": "model.lora_rank", "lora_alpha": "model.lora_alpha", "target_modules": "model.target_modules",
    "exclude_modules": "model.exclude_modules", "path": "model.lora_adapter_path",
}
_TRINITY_DEFAULTS = {"lora_rank": 32, "lora_alpha": 32}  # Trinity-RFT's, unlike posttrain's (0, 16)
_TRINITY_DROPPED = {
    "name": "the name vLLM serves the adapter under; " + _MERGED,
    "base_model_name": "vLLM's base model name for the adapter; " + _MERGED,
    "is_dummy": "set by Trinity-RFT itself",
}


def trinity_lora(ctx: Context) -> None:
    key = "model.lora_configs"
    if not ctx.has(key):
        return
    ctx.consume(key)
    items = ctx.get(key)
    if items is None:
        ctx.drop(key, "null: LoRA is off")
        return
    if not isinstance(items, list) or len(items) != 1 or not isinstance(items[0], dict):
        ctx.refuse(key, "expected a list of one adapter: posttrain trains one LoRA adapter (Trinity-RFT too accepts one)", "model.lora_rank", items)
        return
    item = items[0]
    for name, value in item.items():
        where = f"{key}[0].{name}"
        if name in _TRINITY_FIELDS:
            ctx.set(_TRINITY_FIELDS[name], value, where)
        elif name in _TRINITY_DROPPED:
            ctx.drop(where, _TRINITY_DROPPED[name])
        elif name == "lora_dtype":  # declared in its LoRAConfig, read by none of its modules
            ctx.drop(where, "read by nothing in Trinity-RFT, whose trainer builds adapters with peft's default (fp32 over a bf16 or fp16 model, as posttrain's model.autocast_adapter_dtype)")
        else:
            ctx.refuse(where, "no posttrain equivalent (a LoRA adapter's keys are lora_rank, lora_alpha, target_modules, exclude_modules, path)", None, value)
    if item.get("path") is None:  # a fresh adapter: Trinity-RFT's defaults where the item is silent
        for name, default in _TRINITY_DEFAULTS.items():
            if name not in item:
                ctx.set(_TRINITY_FIELDS[name], default, key, f"Trinity-RFT's default {name} {default}")
