"""`critic`: the value model trained for GAE."""

from __future__ import annotations

from posttrain.config.fields import param, section
from posttrain.config.sections.optim import OptimConfig


@section
class CriticConfig:
    """Value model, its batching and optimizer."""

    ppo_mini_batch_size: int = param(8, doc="Prompts per critic optimizer step (x rollout.n responses).", ge=1, refs=["verl:critic.ppo_mini_batch_size"])
    ppo_micro_batch_size_per_gpu: int = param(8, doc="Responses per critic forward/backward pass on one device.", ge=1, refs=["verl:critic.ppo_micro_batch_size_per_gpu"])
    optim: OptimConfig = param(factory=OptimConfig, doc="Optimizer and LR schedule of the critic.")
