"""An experience: one explored batch (a step's rollouts, scored), as the trainer consumes it.

The explorer turns a batch of prompts into responses and scores (rollout + reward); the trainer
turns an experience into an update (log-probs, advantages, losses). In the synchronous loop the
experience passes from one half of `RLTrainer.step` to the other in memory; in a decoupled run it
travels through an experience buffer (`posttrain.buffer.sqlite`), so it has a byte form:
tensors as safetensors, the per-row lists (prompt uids, data sources, ground truths, extra info...)
and scalars as JSON. Nothing is unpickled on the way back.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from posttrain.errors import UserError
from posttrain.records import RolloutBatch


@dataclass
class Experience:
    """A scored batch of rollouts and what the explorer knew when it made it."""

    batch: RolloutBatch  # prompts and responses, rollout log-probs, sampling version, reward baselines
    scores: torch.Tensor | None  # (B,) reward of every response; None while reward_job runs
    texts: list[str]  # decoded responses (for dumps)
    reward_metrics: dict[str, float] = field(default_factory=dict)  # reward/... of this batch
    explore_metrics: dict[str, float] = field(default_factory=dict)  # timing/gen_s, ... of the explorer
    policy_step: int = 0  # the trainer step whose weights sampled it (0: the starting weights)
    # prompt batches the explorer had drawn from its sampler through this batch (dynamic sampling draws
    # more than one per batch; a resumed explorer continues the data order after them); 0: one per batch
    drawn: int = 0
    # reward.launch_reward_fn_async: the scoring still running (its result() gives scores, metrics,
    # extras); the synchronous loop's learner settles it after the log-prob passes
    reward_job: Any = None

    def settle(self) -> None:
        """Wait for a background scoring and take its scores and metrics (nothing when none runs)."""
        if self.reward_job is None:
            return
        scored = self.reward_job.result()
        self.scores = scored.scores
        self.reward_metrics.update(scored.metrics)
        self.reward_job = None

    def to_bytes(self) -> bytes:
        """The experience as one self-describing byte string (see the module docstring)."""
        if self.reward_job is not None or self.scores is None:
            raise RuntimeError("an experience still being scored cannot be stored: settle() it first")
        tensors: dict[str, torch.Tensor] = {"scores": self.scores.detach().cpu().contiguous()}
        lists: dict[str, Any] = {}
        for f in dataclasses.fields(self.batch):
            value = getattr(self.batch, f.name)
            if isinstance(value, torch.Tensor):
                tensors[f"batch.{f.name}"] = value.detach().cpu().contiguous()
            elif value is not None:
                lists[f.name] = value
        header = {
            "lists": lists, "texts": self.texts, "reward_metrics": self.reward_metrics,
            "explore_metrics": self.explore_metrics, "policy_step": self.policy_step,
            "drawn": self.drawn,
        }
        try:
            meta = json.dumps(header)
        except TypeError as err:
            raise UserError(
                f"an experience cannot be stored in the experience buffer: a per-row field holds a value JSON cannot "
                f"write ({err}); keep ground truths and extra_info to strings, numbers, lists and dicts"
            ) from None
        blob = save_tensors(tensors)
        meta_bytes = meta.encode("utf-8")
        return len(meta_bytes).to_bytes(8, "little") + meta_bytes + blob

    @classmethod
    def from_bytes(cls, data: bytes) -> Experience:
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + size].decode("utf-8"))
        tensors = load_tensors(data[8 + size :])
        fields = {name.removeprefix("batch."): t for name, t in tensors.items() if name.startswith("batch.")}
        fields.update(header["lists"])
        return cls(
            batch=RolloutBatch(**fields), scores=tensors["scores"], texts=header["texts"],
            reward_metrics=header["reward_metrics"], explore_metrics=header["explore_metrics"],
            policy_step=int(header["policy_step"]), drawn=int(header.get("drawn", 0)),
        )
