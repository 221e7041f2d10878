"""The rollout engine extension point: sampling parameters, the engine protocol, the staleness error.

Engines (`hf`, built in; `vllm` and `sglang`, adapters over those libraries; chosen by `rollout.name`
through `posttrain.rollout.engines`) all take a `PromptBatch` and return a `RolloutBatch`, and all
track which version of the policy weights they hold. The trainer says which version it expects on
every call, so an engine that missed a weight sync fails loudly instead of sampling from a stale
policy while the log-probs it reports look perfectly plausible. The contract every engine keeps is
written down in docs/engines.md and checked by tests/rollout/engine_contract.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.progress import OverRollout


class StalePolicyError(RuntimeError):
    """The engine's weights are not the version the trainer expects (a missed `update_weights`).

    Not a `UserError`: no configuration causes it, only a driver bug.
    """


@dataclass(frozen=True)
class SamplingParams:
    """How to sample responses. The trainer maps `rollout.*` (and `rollout.val_kwargs.*`) onto it.

    Recorded log-probs are always log softmax(logits / temperature) of the unmodified model, the
    distribution the actor recomputes; top-k, top-p, min-p and the repetition penalty only shape
    which token is drawn (see `posttrain.rollout.sampling`).

    A response ends at EOS (unless `ignore_eos`), at any of `stop_token_ids`, or at the token that
    completes one of the `stop` strings; that token is part of the response (unless `include_stop`
    is False: then the stop string's tokens are taken off again). `seed` makes this
    request's samples reproducible: the same seed, prompt uid and weights give the same responses
    whatever else shares the batch (None: the engine's own seed for the call).
    """

    temperature: float = 1.0
    top_k: int = -1  # -1 or 0: off
    top_p: float = 1.0  # 1.0: off
    do_sample: bool = True  # False: greedy (argmax), temperature then only scales the recorded log-probs
    n: int = 1  # responses per prompt
    max_new_tokens: int = 64
    ignore_eos: bool = False  # keep going after EOS; extra `stop_token_ids` still stop
    repetition_penalty: float = 1.0  # 1.0: off; CTRL-style, as HF's RepetitionPenaltyLogitsProcessor
    stop_token_ids: tuple[int, ...] = ()  # stop after any of these, in addition to EOS
    # prompt + response cap per row (model.max_model_len): a row stops after max_total_tokens minus its
    # prompt's real tokens, at least one token; None: max_new_tokens alone
    max_total_tokens: int | None = None
    min_p: float = 0.0  # 0.0: off; else drop tokens less likely than min_p x the most likely one
    stop: tuple[str, ...] = ()  # stop after the token that completes any of these strings
    # False: the rollout role drops the tokens of the stop string from the response (the tokens
    # from the one where the string starts; posttrain.rollout.stops.kept_length), so neither the
    # reward's text nor the loss sees it
    include_stop: bool = True
    seed: int | None = None  # this request's sampling seed; None: the engine's
    # EOS and stop ids cannot be drawn at the first min_new_tokens decode steps (vLLM's min_tokens,
    # SGLang's min_new_tokens); 0: off. max_new_tokens and max_total_tokens still end a row earlier.
    min_new_tokens: int = 0
    # The first token alone is drawn at this temperature and top-k (FIRE sampling); None: the
    # temperature/top_k above. Recorded log-probs stay at `temperature` (module docstring).
    first_token_temperature: float | None = None
    first_token_top_k: int | None = None
    # Wall-clock time (time.time() seconds) at which the engine stops decoding (explorer.max_timeout):
    # rows still being generated then end there, flagged in RolloutBatch.timed_out; None: no deadline.
    # An absolute time, so every process of a run reads it alike.
    deadline: float | None = None
    # explorer.over_rollout: once ceil(groups x (1 - ratio)) of the call's prompt groups have finished,
    # the deadline becomes min(deadline, then + wait_s); the rows it ends are flagged in
    # RolloutBatch.over_rolled (posttrain.rollout.progress). None: wait for every group.
    over_rollout: OverRollout | None = None

    def draw_settings(self, step: int) -> tuple[float, int]:
        """(temperature, top_k) that draw decode step `step` (0: the first response token)."""
        if step == 0:
            temperature = self.temperature if self.first_token_temperature is None else self.first_token_temperature
            return temperature, self.top_k if self.first_token_top_k is None else self.first_token_top_k
        return self.temperature, self.top_k

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.min_p <= 1.0:
            problems.append(f"min_p must be in [0, 1], got {self.min_p}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            problems.append(f"stop must hold non-empty strings, got {self.stop!r}")
        if self.temperature <= 0:
            problems.append(f"temperature must be > 0 (use do_sample=False for greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            problems.append(f"top_k must be -1 (off), 0 (off) or positive, got {self.top_k}")
        if self.n < 1 or self.max_new_tokens < 1:
            problems.append(f"n and max_new_tokens must be >= 1, got n={self.n}, max_new_tokens={self.max_new_tokens}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.min_new_tokens < 0:
            problems.append(f"min_new_tokens must be >= 0, got {self.min_new_tokens}")
        if self.first_token_temperature is not None and self.first_token_temperature <= 0:
            problems.append(f"first_token_temperature must be > 0, got {self.first_token_temperature}")
        if self.first_token_top_k is not None and self.first_token_top_k < -1:
            problems.append(f"first_token_top_k must be -1 (off), 0 (off) or positive, got {self.first_token_top_k}")
        if problems:
            raise ValueError("; ".join(problems))

    def greedy(self) -> SamplingParams:
        """The same limits with argmax decoding and one response: validation's default."""
        return replace(self, do_sample=False, n=1, top_k=-1, top_p=1.0, min_p=0.0, first_token_temperature=None, first_token_top_k=None)


# What `update_weights` accepts: (name, tensor) pairs as they arrive (a generator: a sharded actor
# gathers each tensor just before it is sent, so no second whole copy is held), a state dict, or
# the module itself.
Weights = Iterable[tuple[str, Tensor]] | Mapping[str, Tensor] | nn.Module


def named_tensors(weights: Weights) -> Iterable[tuple[str, Tensor]]:
    """(name, tensor) pairs of any `Weights` form, without copying."""
    if isinstance(weights, nn.Module):
        return weights.state_dict().items()
    if isinstance(weights, Mapping):
        return weights.items()
    return weights


def buckets(pairs: Iterable[tuple[str, Tensor]], bucket_bytes: int) -> Iterable[list[tuple[str, Tensor]]]:
    """Group (name, tensor) pairs into lists of about `bucket_bytes` each (a tensor larger than a
    bucket travels alone), in order, pulling from `pairs` only as each bucket fills: an engine in
    another process or library loads one bucket per call, so at most one bucket is in flight.

    >>> t = torch.zeros(4)  # 16 bytes
    >>> [[n for n, _ in b] for b in buckets([("a", t), ("b", t), ("c", t)], 32)]
    [['a', 'b'], ['c']]
    """
    bucket: list[tuple[str, Tensor]] = []
    size = 0
    for name, tensor in pairs:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer needs from a generation backend (docs/engines.md has the whole contract).

    An engine whose tensor-parallel ranks are several worker processes also has `ranks_per_engine`
    (how many consecutive ones); the rollout role then gives all of them the same prompts. Without
    it, every worker process holds an engine of its own."""

    device: torch.device  # where the returned RolloutBatch's tensors live

    @property
    def weights_version(self) -> int:
        """Version of the policy weights the engine samples from (set by `update_weights`)."""
        ...

    def generate(
        self, prompts: PromptBatch, params: SamplingParams, *, expected_version: int, seed: int | None = None
    ) -> RolloutBatch:
        """`params.n` responses per prompt, rows of a prompt adjacent, `group_index` = prompt uid,
        `rollout_logprobs` = log softmax(logits / temperature) of each sampled token.

        Raises `StalePolicyError` when `expected_version != weights_version`. `seed` replaces the
        engine's seed for this call (`params.seed`, when set, wins over both).
        """
        ...

    def update_weights(self, weights: Weights, version: int) -> None:
        """Load the actor's new weights as `version`, in place, consuming (name, tensor) pairs as
        they arrive; every tensor of the engine's model must be named once."""
        ...

    def sleep(self, level: int = 1) -> None:
        """Free device memory between generations: level 1 keeps the weights in host memory, level
        2 drops them (the next `update_weights` must refill them before `generate`)."""
        ...

    def wake_up(self) -> None:
        """Retake the device memory `sleep` freed (a no-op when awake)."""
        ...
