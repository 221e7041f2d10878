"""Rollout engines: turn a `PromptBatch` into a `RolloutBatch` with the current policy."""

from posttrain.rollout.base import RolloutEngine, SamplingParams, StalePolicyError
from posttrain.rollout.hf_engine import HFEngine

__all__ = ["HFEngine", "RolloutEngine", "SamplingParams", "StalePolicyError"]
