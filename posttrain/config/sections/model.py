"""`model`: the policy model directory and how every role loads it."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class ModelConfig:
    """The policy model: a local Hugging Face directory and loading options."""

    path: str = param("", doc="Local Hugging Face model directory of the policy.", refs=["verl:actor_rollout_ref.model.path"])
