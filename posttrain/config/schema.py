"""The root of posttrain's native config schema.

Why dataclasses and not pydantic: the schema is plain data that must ship to other processes (Ray
workers) and be read by OmegaConf, which understands dataclasses natively; validation needs
full-path error messages, "did you mean" suggestions and `todo` (not-implemented) markers that we
control, so posttrain's own validator (posttrain.config.validate) walks the dataclass fields and
their `param` metadata. Sections are frozen: the config never changes after derivation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from posttrain.config.fields import param, section, section_class, section_fields
from posttrain.config.sections.actor import ActorConfig
from posttrain.config.sections.algorithm import AlgorithmConfig
from posttrain.config.sections.buffer import BufferConfig
from posttrain.config.sections.cluster import ClusterConfig
from posttrain.config.sections.critic import CriticConfig
from posttrain.config.sections.data import DataConfig
from posttrain.config.sections.data_processor import DataProcessorConfig
from posttrain.config.sections.env import EnvConfig
from posttrain.config.sections.eval import EvalConfig
from posttrain.config.sections.explorer import ExplorerConfig
from posttrain.config.sections.log import LogConfig
from posttrain.config.sections.model import ModelConfig
from posttrain.config.sections.prepare import PrepareConfig
from posttrain.config.sections.profiler import GlobalProfilerConfig
from posttrain.config.sections.ref import RefConfig
from posttrain.config.sections.reward import RewardConfig
from posttrain.config.sections.rollout import RolloutConfig
from posttrain.config.sections.synchronizer import SynchronizerConfig
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
    profiler: GlobalProfilerConfig = param(factory=GlobalProfilerConfig, doc="Profiling of chosen RL steps (torch traces, memory snapshots).")
    log: LogConfig = param(factory=LogConfig, doc="Text logs of the run's processes.")
    env: EnvConfig = param(factory=EnvConfig, doc="Environments of agentic (multi-turn) RL.")
    explorer: ExplorerConfig = param(factory=ExplorerConfig, doc="Generating half of a decoupled explorer/trainer run.")
    buffer: BufferConfig = param(factory=BufferConfig, doc="Tasksets and experience buffers of a decoupled run.")
    synchronizer: SynchronizerConfig = param(factory=SynchronizerConfig, doc="Weight synchronisation of a decoupled run.")
    data_processor: DataProcessorConfig = param(factory=DataProcessorConfig, doc="Operator pipelines over tasks and experiences.")
    prepare: PrepareConfig = param(factory=PrepareConfig, doc="Tiny model and synthetic task built before the run when missing.")
    eval: EvalConfig = param(factory=EvalConfig, doc="The file of generated responses `posttrain eval` scores (verl's offline evaluation).")
    stages: list[dict[str, Any]] = param(factory=list, doc="Multi-stage run: each item has `name` plus section overrides, run in order.", refs=["trinity:stages", "trinity:stages.stage_name"])


def defaults_dict(schema: type = Config) -> dict[str, Any]:
    """Every field of the schema at its default, as plain nested dicts/lists: the base that a
    config file (native, or translated from a foreign dialect) is merged onto before validation."""
    out: dict[str, Any] = {}
    for info in section_fields(schema):
        sub = section_class(info.type)
        if sub is not None and not info.has_default():
            out[info.name] = defaults_dict(sub)
            continue
        if not info.has_default():
            continue  # a required field: absent, so validation names it
        value = info.default()
        out[info.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return out
