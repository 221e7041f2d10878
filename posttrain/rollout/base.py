"""The rollout engine extension point: sampling parameters, the engine protocol, the staleness error.

Engines (the built-in `hf` one now, vLLM/SGLang later) all take a `PromptBatch` and return a
`RolloutBatch`, and all track which version of the policy weights they hold. The trainer says which
version it expects on every call, so an engine that missed a weight sync fails loudly instead of
sampling from a stale policy while the log-probs it reports look perfectly plausible.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Protocol, runtime_checkable

from torch import Tensor, nn

from posttrain.records import PromptBatch, RolloutBatch


class StalePolicyError(RuntimeError):
    """The engine's weights are not the version the trainer expects (a missed `update_weights`).

    Not a `UserError`: no configuration causes it, only a driver bug.
    """


@dataclass(frozen=True)
class SamplingParams:
    """How to sample responses. The trainer maps `rollout.*` (and `rollout.val_kwargs.*`) onto it.

    Recorded log-probs are always log softmax(logits / temperature) of the unmodified model, the
    distribution the actor recomputes; top-k, top-p and the repetition penalty only shape which
    token is drawn (see `posttrain.rollout.sampling`).
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
    # EOS and stop ids cannot be drawn at the first min_new_tokens decode steps (vLLM's min_tokens,
    # SGLang's min_new_tokens); 0: off. max_new_tokens and max_total_tokens still end a row earlier.
    min_new_tokens: int = 0
    # The first token alone is drawn at this temperature and top-k (FIRE sampling); None: the
    # temperature/top_k above. Recorded log-probs stay at `temperature` (module docstring).
    first_token_temperature: float | None = None
    first_token_top_k: int | None = None

    def draw_settings(self, step: int) -> tuple[float, int]:
        """(temperature, top_k) that draw decode step `step` (0: the first response token)."""
        if step == 0:
            temperature = self.temperature if self.first_token_temperature is None else self.first_token_temperature
            return temperature, self.top_k if self.first_token_top_k is None else self.first_token_top_k
        return self.temperature, self.top_k

    def __post_init__(self) -> None:
        problems = []
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
        return replace(self, do_sample=False, n=1, top_k=-1, top_p=1.0, first_token_temperature=None, first_token_top_k=None)


@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer needs from a generation backend."""

    @property
    def weights_version(self) -> int:
        """Version of the policy weights the engine samples from (set by `update_weights`)."""
        ...

    def generate(self, prompts: PromptBatch, params: SamplingParams, *, expected_version: int) -> RolloutBatch:
        """`params.n` responses per prompt, rows of a prompt adjacent, `group_index` = prompt uid.

        Raises `StalePolicyError` when `expected_version != weights_version`.
        """
        ...

    def update_weights(self, weights: Mapping[str, Tensor] | nn.Module, version: int) -> None:
        """Load the actor's new weights (a state dict or the module itself) as `version`."""
        ...
