"""`rollout`: the generation engine and its sampling parameters."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class RolloutConfig:
    """Sampling responses from the current policy."""

    n: int = param(1, doc="Responses sampled per prompt (the group size of GRPO/RLOO).", ge=1, refs=["verl:actor_rollout_ref.rollout.n"])
