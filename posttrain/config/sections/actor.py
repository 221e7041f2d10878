"""`actor`: policy training (PPO update) and its batching."""

from __future__ import annotations

from posttrain.config.fields import param, section
from posttrain.config.sections.optim import OptimConfig


@section
class ActorConfig:
    """The policy update: mini/micro-batches, epochs, loss options, optimizer."""

    ppo_mini_batch_size: int = param(8, doc="Prompts per optimizer step (x rollout.n responses), across all devices.", ge=1, refs=["verl:actor_rollout_ref.actor.ppo_mini_batch_size"])
    ppo_micro_batch_size_per_gpu: int = param(8, doc="Responses per forward/backward pass on one device (gradient accumulation unit).", ge=1, refs=["verl:actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"])
    use_dynamic_bsz: bool = param(False, doc="Pack micro-batches by token budget (ppo_max_token_len_per_gpu) instead of a fixed count.", refs=["verl:actor_rollout_ref.actor.use_dynamic_bsz"])
    ppo_max_token_len_per_gpu: int = param(16384, doc="Token budget of one micro-batch on one device when use_dynamic_bsz.", ge=1, refs=["verl:actor_rollout_ref.actor.ppo_max_token_len_per_gpu"])
    ppo_epochs: int = param(1, doc="Passes over each rollout batch.", ge=1, refs=["verl:actor_rollout_ref.actor.ppo_epochs"])
    optim: OptimConfig = param(factory=OptimConfig, doc="Optimizer and LR schedule of the actor.")
