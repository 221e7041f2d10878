"""`algorithm`: which RL/SFT/DPO algorithm, its estimator, KL and shaping."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class AlgorithmConfig:
    """Advantage estimation, KL in reward and reward shaping."""

    adv_estimator: str = param("grpo", doc="Advantage estimator name from posttrain.algorithms.ADVANTAGE_ESTIMATORS.", refs=["verl:algorithm.adv_estimator"])
    gamma: float = param(1.0, doc="Discount factor.", ge=0, le=1, refs=["verl:algorithm.gamma"])
    lam: float = param(1.0, doc="GAE lambda.", ge=0, le=1, refs=["verl:algorithm.lam"])
