"""The root of posttrain's native config schema.

Why dataclasses and not pydantic: the schema is plain data that must ship to other processes (Ray
workers) and be read by OmegaConf, which understands dataclasses natively; validation needs
full-path error messages, "did you mean" suggestions and `todo` (not-implemented) markers that we
control, so posttrain's own validator (posttrain.config.validate) walks the dataclass fields and
their `param` metadata. Sections are frozen: the config never changes after derivation.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section
from posttrain.config.sections.actor import ActorConfig
from posttrain.config.sections.algorithm import AlgorithmConfig
from posttrain.config.sections.cluster import ClusterConfig
from posttrain.config.sections.critic import CriticConfig
from posttrain.config.sections.data import DataConfig
from posttrain.config.sections.model import ModelConfig
from posttrain.config.sections.ref import RefConfig
from posttrain.config.sections.reward import RewardConfig
from posttrain.config.sections.rollout import RolloutConfig
from posttrain.config.sections.trainer import TrainerConfig


@section
class Config:
    """A whole posttrain experiment."""

    data: DataConfig = param(factory=DataConfig, doc="Training/validation data and prompt formatting.")
    model: ModelConfig = param(factory=ModelConfig, doc="The policy model and how roles load it.")
    rollout: RolloutConfig = param(factory=RolloutConfig, doc="Response generation (engine and sampling).")
    actor: ActorConfig = param(factory=ActorConfig, doc="Policy training.")
    ref: RefConfig = param(factory=RefConfig, doc="Frozen reference policy for KL terms.")
    critic: CriticConfig = param(factory=CriticConfig, doc="Value model for GAE.")
    reward: RewardConfig = param(factory=RewardConfig, doc="Scoring responses.")
    algorithm: AlgorithmConfig = param(factory=AlgorithmConfig, doc="Algorithm, advantages, KL and reward shaping.")
    trainer: TrainerConfig = param(factory=TrainerConfig, doc="Run length, logging, validation, checkpoints.")
    cluster: ClusterConfig = param(factory=ClusterConfig, doc="Nodes, devices and processes.")
    stages: list[dict[str, Any]] = param(factory=list, doc="Multi-stage run: each item has `name` plus section overrides, run in order.", refs=["trinity:stages"])
