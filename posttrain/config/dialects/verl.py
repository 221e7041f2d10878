"""verl keys dropped rather than refused, beyond Hydra's own (posttrain.config.dialects.source).

`null_profile_steps` is a handler (it runs before the key-by-key translation); `ignorable` decides
for keys without a field.

verl's default config spells out every profiler tool's options (nsys, npu, torch_memory) and each
role's copy of the global tool and save path. Those configure a tool the run does not use, or repeat
a global value: dropping them changes nothing, and refusing them would refuse every whole verl
config. A value that would change something (the chosen tool's own options, a role's other save
path) is still refused with the reason from the schema's UNSUPPORTED tables.
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.config.dialects.source import hydra_ignorable

_ROLLOUT, _ACTOR = "actor_rollout_ref.rollout.profiler.", "actor_rollout_ref.actor.profiler."
_TOOL_OPTIONS = re.compile(r"(^global_profiler\.global_tool_config|\.profiler\.tool_config)\.(nsys|npu|torch_memory)\.")


def null_profile_steps(ctx: Any) -> None:
    """verl's `steps: null` (no profiling) in either of its two spellings is left out, so that it
    does not conflict with a list given in the other one."""
    for key in ("global_profiler.steps", "trainer.profile_steps"):
        if ctx.has(key) and ctx.get(key) is None:
            ctx.consume(key)
            ctx.drop(key, "null: no steps profiled (posttrain's default, profiler.steps: [])")


HANDLERS = [null_profile_steps]


_ANY_VALUE = {
    "trainer.use_legacy_worker_impl": "which of verl's two worker implementations runs; posttrain has one",
    "actor_rollout_ref.actor.fsdp_config.use_orig_params": "an FSDP1 option; FSDP2 (posttrain's) always keeps the original parameters",
}


def ignorable(ctx: Any, key: str, value: Any) -> str | None:
    if key in _ANY_VALUE:
        return _ANY_VALUE[key]
    if key == "actor_rollout_ref.ref.use_torch_compile" and value == ctx.get("actor_rollout_ref.actor.use_torch_compile", True):
        return "the same as the actor's use_torch_compile (posttrain's reference runs the actor's forward)"
    return hydra_ignorable(ctx, key, value) or _profiler_ignorable(ctx, key, value)


def _profiler_ignorable(ctx: Any, key: str, value: Any) -> str | None:
    tool = ctx.get("global_profiler.tool")
    match = _TOOL_OPTIONS.search(key + ".")
    if match and match.group(2) != tool:
        return f"options of the {match.group(2)} profiler, and global_profiler.tool is {tool or 'null'}: not used"
    if key.endswith("torch_memory.stack_depth"):
        return "torch's CUDA memory history has no stack-depth option (verl passes it only where torch has one)"
    if key.startswith(_ROLLOUT) and value == ctx.get(_ACTOR + key[len(_ROLLOUT):]):
        return "the same as the actor's (posttrain's rollout is profiled with actor.profiler)"
    if key.endswith(".profiler.tool") and value in (None, tool):
        return "the same as global_profiler.tool (posttrain uses one tool for every role)"
    if key.endswith(".profiler.save_path") and value in (None, ctx.get("global_profiler.save_path")):
        return "the same as global_profiler.save_path (posttrain writes every role's traces under it)"
    return None
