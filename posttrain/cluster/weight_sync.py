"""Moving the actor's weights into the rollout engine after every update: one object, one call.

The trainer calls `sync.push(version)` after the actor's update and never asks how the weights
travel. Which way is fixed when the roles are built (`weight_sync_for`):

- `SharedModule`: one process, the engine samples from the actor's very module (same dtype): there
  is nothing to copy; only the version moves.
- `LocalCopy`: one process, the engine keeps its own copy (another dtype: `rollout.dtype`, or an
  engine of another library: vLLM, SGLang): the actor's tensors are sent one by one as (name,
  tensor) pairs and copied in place (an engine in another library groups them into buckets).
- `GatherShards`: the actor is sharded over the worker processes (FSDP2) and every worker's engine
  holds a whole copy: each parameter is all-gathered from its shards and copied into the engine's
  tensor of the same name, one parameter at a time, so no second whole copy of the model is ever
  held beside the engine's (the peak is the engine plus the largest single parameter).
- `MergedAdapters`: the actor trains LoRA adapters (`posttrain.models.lora`) and the engine holds a
  plain copy of the base model: each targeted weight is sent merged, W + (alpha / r) B A, the
  others as they are; sharded or not, one tensor at a time as `GatherShards` does.

Every `push` is timed by the trainer (`timing/sync_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from posttrain.rollout.base import RolloutEngine as Engine


class WeightSync(Protocol):
    def push(self, version: int) -> None:
        """Give the engine the actor's current weights, labelled `version`."""
        ...


@dataclass
class SharedModule:
    """The engine holds the actor's module: only the version label moves."""

    engine: Engine
    module: nn.Module

    def push(self, version: int) -> None:
        self.engine.update_weights(self.module, version)


@dataclass
class LocalCopy:
    """The engine holds its own copy in this process: copy the actor's tensors into it."""

    engine: Engine
    module: nn.Module

    def push(self, version: int) -> None:
        self.engine.update_weights(iter(self.module.state_dict().items()), version)


@dataclass
class GatherShards:
    """The actor is sharded over the ranks; every rank's engine holds the whole model. A collective:
    every rank pushes at the same point of the step."""

    engine: Engine
    module: nn.Module  # the actor's model (inside its FSDP root)

    def push(self, version: int) -> None:
        self.engine.update_weights(whole_tensors(self.module), version)


def whole_tensors(module: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, whole tensor) of every parameter and buffer, gathering sharded ones one at a time.

    Every rank must consume the iterator to its end in the same order (each gather is a collective)."""
    with torch.no_grad():
        for name, tensor in module.state_dict(keep_vars=False).items():
            yield name, tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


@dataclass
class MergedAdapters:
    """The actor's LoRA model, merged into the engine's plain copy (a collective when sharded)."""

    engine: Engine
    module: nn.Module  # the actor's model with its adapter (inside its FSDP root when sharded)

    def push(self, version: int) -> None:
        from posttrain.models.lora import merged_tensors

        self.engine.update_weights(merged_tensors(self.module), version)


def weight_sync_for(engine: Engine, actor_model: nn.Module, sharded: bool, adapters: bool = False) -> WeightSync:
    """The way weights travel for this placement (see the module docstring); `adapters`: the actor
    trains LoRA adapters."""
    if adapters:
        return MergedAdapters(engine, actor_model)
    if sharded:
        return GatherShards(engine, actor_model)
    if getattr(engine, "model", None) is actor_model:  # the hf engine over the actor's own module
        return SharedModule(engine, actor_model)
    return LocalCopy(engine, actor_model)
