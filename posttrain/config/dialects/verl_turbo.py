"""verl 0.10's FSDP-Turbo engine (``strategy: fsdp_turbo``) on posttrain's FSDP2.

FSDP-Turbo shards the Hugging Face model with torch's FSDP2 (its ``native`` implementation) on one
device mesh with expert and context parallelism; verl builds it from the role's
``fsdp_config.turbo_config`` (``critic.fsdp.turbo_config`` for the critic) and reads that section
only under this strategy (verl/workers/engine/fsdp/fsdp_turbo_impl.py):

- ``strategy: fsdp_turbo`` -> the role's ``strategy: fsdp2``.
- ``distributed.fully_shard_parallel_size`` (processes sharing one set of shards, 16 when not
  given) -> the role's ``fsdp_config.fsdp_size``; ``ulysses_parallel_size`` -> the role's Ulysses
  size; ``tensor_parallel_size`` is reserved and must stay 1.
- ``fsdp_plan``: ``param_dtype`` / ``reduce_dtype`` -> the role's ``fsdp_config.mixed_precision``;
  ``output_dtype`` equal to the compute dtype, the ``native`` implementation, prefetch counts and
  the modules wrapped or hooked say how the same numbers are computed: dropped.
- Expert parallelism (``expert_parallel_size``, ``expert_fully_shard_parallel_size``, ``ep_plan``):
  experts split over devices, dispatched without a capacity: the same computation, dropped.
- ``cp_plan`` and ``module_patches``: the functions FSDP-Turbo replaces so that its context
  parallelism reaches the model's attention, gated-delta-net layers and loss; posttrain's Ulysses
  splits attention itself and names a model it cannot split: dropped.
- ``memory.recompute`` -> gradient checkpointing of the role (verl's own
  ``model.enable_gradient_checkpointing`` adds Hugging Face checkpointing beside it, so with
  recompute on that key is dropped); ``recompute_plan`` (which modules) is dropped, posttrain
  recomputing every decoder layer.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.source import leaves
from posttrain.config.dialects.verl_megatron import GRADIENT_CHECKPOINTING
from posttrain.config.dialects.verl_release import value_of
from posttrain.config.tables import Rule

# role prefix -> (posttrain role, its engine section); the critic's critic.fsdp is read as 0.8's
# critic.model.fsdp_config (posttrain.config.dialects.verl_moved) before the handlers run
SECTIONS = {"actor_rollout_ref.actor": ("actor", "fsdp_config"), "actor_rollout_ref.ref": ("ref", "fsdp_config"), "critic": ("critic", "model.fsdp_config")}
_SAME = "how or where the same numbers are computed: posttrain's FSDP2 shards the role over the same devices"
_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp32": "fp32", "float32": "fp32"}
LAYOUT = {
    "distributed.expert_parallel_size": f"expert parallelism: experts split over devices, dispatched without a capacity (dropless); {_SAME}",
    "distributed.expert_fully_shard_parallel_size": f"how the expert weights are sharded within an expert-parallel group; {_SAME}",
    "distributed.fsdp_plan.fsdp_implementation": "native: torch's FSDP2, posttrain's sharding",
    "distributed.fsdp_plan.num_to_forward_prefetch": f"how many layers' parameters are gathered ahead in the forward; {_SAME}",
    "distributed.fsdp_plan.num_to_backward_prefetch": f"how many layers' parameters are gathered ahead in the backward; {_SAME}",
    "distributed.fsdp_plan.apply_modules": f"which modules are FSDP units; {_SAME}",
    "distributed.fsdp_plan.hook_modules": f"modules whose hooks FSDP-Turbo manages to overlap recomputation; {_SAME}",
    "distributed.ep_plan": f"which modules are split over the expert-parallel group and how tokens reach them; {_SAME}",
    "distributed.cp_plan": ("the functions FSDP-Turbo patches so its context parallelism reaches attention, gated-delta-net layers "
                            "and the loss; posttrain's Ulysses splits attention itself and names a model it cannot split"),
    "module_patches": ("FSDP-Turbo's replacement of the model's forward for its context-parallel split; posttrain runs the Hugging "
                       "Face forward, the same numbers"),
    "memory.recompute_plan": "which modules are recomputed in the backward: the same gradients (posttrain recomputes every decoder layer)",
}


def is_turbo(ctx: Any, prefix: str) -> bool:
    """Whether verl runs the role at ``prefix`` with FSDP-Turbo."""
    return ctx.get(f"{prefix}.strategy") == "fsdp_turbo"


def turbo(ctx: Any) -> None:
    """Each role's strategy and turbo_config (module docstring)."""
    for prefix, (role, engine) in SECTIONS.items():
        base = f"{prefix}.{engine}.turbo_config"
        on = is_turbo(ctx, prefix)
        if on:
            ctx.consume(f"{prefix}.strategy")
            ctx.set(f"{role}.strategy", "fsdp2", f"{prefix}.strategy", "fsdp_turbo: FSDP-Turbo shards the model with torch's FSDP2, as posttrain does")
            size = f"{base}.distributed.fully_shard_parallel_size"
            if not ctx.has(size):  # FSDP-Turbo's own default, which verl's tree writes
                _fsdp_size(ctx, role, size, _tree_value(ctx, size), default=True)
        section = ctx.get(base)
        if not isinstance(section, dict):
            continue
        for name, value in leaves(section).items():
            key = f"{base}.{name}"
            if not ctx.has(key) or key in ctx.handled:
                continue
            ctx.consume(key)
            if not on:
                ctx.drop(key, f"read by verl only with {prefix}.strategy fsdp_turbo")
            else:
                _one(ctx, prefix, role, key, name, value)


def _one(ctx: Any, prefix: str, role: str, key: str, name: str, value: Any) -> None:
    layout = next((why for head, why in LAYOUT.items() if name == head or name.startswith(head + ".")), None)
    if layout is not None:
        ctx.drop(key, layout)
    elif name == "distributed.fully_shard_parallel_size":
        _fsdp_size(ctx, role, key, value)
    elif name == "distributed.tensor_parallel_size":
        if value == 1:
            ctx.drop(key, "1: FSDP-Turbo reserves the key and splits no tensors")
        else:
            ctx.refuse(key, f"{value}: FSDP-Turbo reserves tensor parallelism (keep 1), and posttrain's FSDP2 splits no tensors", None, value)
    elif name == "distributed.ulysses_parallel_size":
        _ulysses(ctx, prefix, role, key, value)
    elif name in ("distributed.fsdp_plan.param_dtype", "distributed.fsdp_plan.reduce_dtype"):
        _dtype(ctx, role, key, name.rsplit(".", 1)[1], value)
    elif name == "distributed.fsdp_plan.output_dtype":
        compute = _tree_value(ctx, key.rsplit(".", 1)[0] + ".param_dtype")
        if _DTYPES.get(str(value)) == _DTYPES.get(str(compute)):
            ctx.drop(key, "the forward's outputs in the compute dtype (param_dtype), as posttrain's autocast gives them")
        else:
            ctx.refuse(key, f"{value}: outputs cast to another dtype than the compute dtype {compute}; posttrain's forward returns the "
                            "compute dtype", None, value)
    elif name == "memory.recompute":
        if role == "ref" or not value:
            ctx.drop(key, "the reference computes no gradients: nothing to recompute" if value else "false: no recomputation")
        else:
            # verl's own switch (actor_rollout_ref.model.* / critic.model.*) adds Hugging Face checkpointing
            # beside FSDP-Turbo's: either recomputes, so with this one on the other says nothing more
            theirs = "actor_rollout_ref.model.enable_gradient_checkpointing" if role == "actor" else "critic.model.enable_gradient_checkpointing"
            if ctx.has(theirs) and theirs not in ctx.handled:
                ctx.consume(theirs)
                ctx.drop(theirs, f"{ctx.get(theirs)}: under fsdp_turbo {key} (true) recomputes the layers whatever this says")
            ctx.set(GRADIENT_CHECKPOINTING[role], True, key, "recompute activations in the backward pass (gradient checkpointing of every decoder layer)")
    else:
        ctx.refuse(key, f"not a key of verl's FSDP-Turbo config ({key.rsplit('.turbo_config.', 1)[0]}.turbo_config)", None, value)


def _tree_value(ctx: Any, key: str) -> Any:
    """The line's value of ``key``, else verl's default: the critic's keys are read under 0.8's
    spelling (critic.model.fsdp_config), and verl 0.10's tree writes their defaults under critic.fsdp."""
    found = value_of(ctx, key)
    if found is None and key.startswith("critic.model.fsdp_config."):
        found = value_of(ctx, "critic.fsdp." + key.removeprefix("critic.model.fsdp_config."))
    return found


def _fsdp_size(ctx: Any, role: str, key: str, value: Any, default: bool = False) -> None:
    why = "processes sharing one set of parameter shards (FSDP-Turbo's FSDP group); the rest replicate (HSDP)"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        ctx.refuse(key, f"expected a whole number >= 1, got {value!r}", f"{role}.fsdp_config.fsdp_size", value)
    elif default:
        ctx.set(f"{role}.fsdp_config.fsdp_size", value, key, f"{why}: FSDP-Turbo's default {value}, which the line leaves")
    else:
        ctx.set(f"{role}.fsdp_config.fsdp_size", value, key, why)


def _ulysses(ctx: Any, prefix: str, role: str, key: str, value: Any) -> None:
    """FSDP-Turbo's context parallelism is Ulysses over heads (verl forbids its own Ulysses beside it)."""
    actor = _tree_value(ctx, "actor_rollout_ref.actor.fsdp_config.turbo_config.distributed.ulysses_parallel_size")
    if role == "ref" and is_turbo(ctx, "actor_rollout_ref.actor") and value == actor:
        ctx.drop(key, "the actor's: posttrain's reference splits its sequences as the actor does (ref.ulysses_sequence_parallel_size null)")
    elif value == 1:
        ctx.drop(key, "1: no context parallelism from FSDP-Turbo (verl's own ulysses_sequence_parallel_size still applies)")
    else:
        ctx.set(f"{role}.ulysses_sequence_parallel_size", value, key, "FSDP-Turbo's context parallelism: sequences split over that many processes, heads exchanged all-to-all (Ulysses, as posttrain's)")


def _dtype(ctx: Any, role: str, key: str, name: str, value: Any) -> None:
    native = _DTYPES.get(str(value))
    target = f"{role}.fsdp_config.mixed_precision.{name}"
    if native is None:
        ctx.refuse(key, f"{value!r}: posttrain's mixed precision computes and reduces in bf16 or fp32 (fp16 needs loss scaling)", target, value)
    elif role == "ref" and name == "reduce_dtype":
        ctx.drop(key, "the reference reduces no gradients")
    else:
        what = "compute dtype of the forward and backward" if name == "param_dtype" else "dtype of the gradient reduction"
        ctx.set(target, native, key, f"FSDP2's {what}")


_T = "actor_rollout_ref.actor.fsdp_config.turbo_config."
_ON = (("actor_rollout_ref.actor.strategy", "fsdp_turbo"),)
# Keys the handler translates (docs/config-mapping.md reads this table: posttrain.config.tables).
RULES: dict[str, Rule] = {
    _T + "distributed.fully_shard_parallel_size": Rule("actor.fsdp_config.fsdp_size", "with strategy fsdp_turbo: processes per sharding group (FSDP-Turbo's default 16 when the line leaves it)", 2, _ON),
    _T + "distributed.ulysses_parallel_size": Rule("actor.ulysses_sequence_parallel_size", "with strategy fsdp_turbo: its context parallelism, Ulysses of that size", 2, _ON),
    _T + "distributed.fsdp_plan.param_dtype": Rule("actor.fsdp_config.mixed_precision.param_dtype", "with strategy fsdp_turbo: the compute dtype (bf16 or fp32)", "fp32", _ON),
    _T + "distributed.fsdp_plan.reduce_dtype": Rule("actor.fsdp_config.mixed_precision.reduce_dtype", "with strategy fsdp_turbo: the gradient reduction's dtype", "bf16", _ON),
    _T + "memory.recompute": Rule("model.enable_gradient_checkpointing", "with strategy fsdp_turbo: true recomputes every decoder layer in the backward", True, _ON),
    **{_T + name: Rule(None, why, "x", _ON) for name, why in LAYOUT.items()},
}

HANDLERS = [turbo]
