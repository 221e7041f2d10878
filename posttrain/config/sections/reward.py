"""`reward`: rule-based scorers, custom reward functions and reward models."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class RewardConfig:
    """How responses are scored."""

    reward_manager: str = param("naive", doc="How scoring is run: naive (in-process) or parallel (process pool).", choices=["naive", "parallel"], refs=["verl:reward_model.reward_manager"])
