"""verl's ``nsys.discrete``: a capture range per worker task instead of one per profiled step.

verl's Nsight profiler (``NsightSystemsProfiler``) with ``discrete: false`` starts the cudaProfilerApi
range when a profiled step starts and stops it when the step ends, each worker task an NVTX range
inside; with ``discrete: true`` it starts and stops one around each task of the roles whose profiler
is enabled. Each role's ``tool_config.nsys.discrete`` follows ``global_profiler.global_tool_config.
nsys.discrete`` (an interpolation in verl's config). posttrain's role ``profiler.discrete`` with tool
nsys does the same per phase (posttrain.trainer.profile_tools.NsysRanges), so the value lands there
for each enabled role. With discrete, verl's ``profile_continuous_steps`` changes nothing (it only
joins the step ranges discrete mode does not open), so it is dropped.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.tables import Rule

GLOBAL = "global_profiler.global_tool_config.nsys.discrete"
# verl role -> posttrain role (the rollout is profiled with the actor: one hybrid worker)
ROLES = {
    "actor_rollout_ref.actor": "actor",
    "actor_rollout_ref.ref": "ref",
    "critic": "critic",
    "reward_model": "reward.reward_model",
}


def _role_key(role: str) -> str:
    return f"{role}.profiler.tool_config.nsys.discrete"


def nsys_discrete(ctx: Any) -> None:
    """Each enabled role's nsys discrete (its own key, else the global one) -> its profiler.discrete,
    when global_profiler.tool is nsys (with another tool the keys configure a tool not used: dropped
    as unused options by the key-by-key pass)."""
    if ctx.get("global_profiler.tool") != "nsys":
        return
    fallback = ctx.get(GLOBAL, False)
    discrete = used_global = False
    for role, native in ROLES.items():
        key = _role_key(role)
        own = ctx.has(key)
        value = ctx.get(key) if own else fallback
        if own:
            ctx.consume(key)
        if not ctx.get(f"{role}.profiler.enable"):
            if own:
                ctx.drop(key, "this role's profiler is not enabled")
            continue
        source = key if own else GLOBAL
        used_global |= not own
        if value not in (True, False, None):
            ctx.refuse(source, f"expected true or false, got {value!r}", f"{native}.profiler.discrete", value)
            continue
        discrete = discrete or bool(value)
        torch_key = f"{role}.profiler.tool_config.torch.discrete"
        if ctx.has(torch_key) and ctx.get(torch_key) in (False, None):
            ctx.consume(torch_key)  # the torch tool's option, not used with nsys (it would land on the same field)
            ctx.drop(torch_key, "options of the torch profiler, and global_profiler.tool is nsys: not used")
        ctx.set(f"{native}.profiler.discrete", bool(value), source,
                "nsys: one capture range per phase of this role" if value else "nsys: one capture range per profiled step")
    if ctx.has(GLOBAL):
        ctx.consume(GLOBAL)
        if not used_global:
            ctx.drop(GLOBAL, "each enabled role's tool_config.nsys.discrete is given (verl's interpolation of this key is overridden)")
    continuous = "global_profiler.profile_continuous_steps"
    if discrete and ctx.has(continuous):
        ctx.consume(continuous)
        ctx.drop(continuous, "with nsys discrete each phase is its own capture range: no step ranges to join (verl ignores it too)")


RULES: dict[str, Rule] = {
    GLOBAL: Rule(", ".join(f"{native}.profiler.discrete" for native in ROLES.values()),
                 "with global_profiler.tool nsys: each enabled role's profiler.discrete (one capture range per phase)", True,
                 (("global_profiler.tool", "nsys"), ("actor_rollout_ref.actor.profiler.enable", True))),
    **{_role_key(role): Rule(f"{native}.profiler.discrete", "with global_profiler.tool nsys and this role's profiler enabled: "
                             "one capture range per phase of the role", True,
                             (("global_profiler.tool", "nsys"), (f"{role}.profiler.enable", True)))
       for role, native in ROLES.items()},
}

HANDLERS = [nsys_discrete]
