"""Scoring responses with a trained reward model, and combining that with rule-based rewards.

The reward model is a local Hugging Face ``AutoModelForSequenceClassification`` with one label. It
reads the whole conversation (prompt + response) and its score is the logit at the last token that
is not the pad token — the position Hugging Face's own sequence-classification pooling uses, so a
model trained with that pooling is scored exactly as it was trained.

With ``offload`` (reward_model.param_offload) the weights live in host memory between scoring
passes and are copied to ``device`` for each pass (verl's legacy reward-model worker with FSDP's
parameter offload; its reward loop's engine, asleep between passes, with free_cache_engine): the
same scores, less device memory between passes, one host-to-device copy per pass.

With ``remove_padding`` (reward_model.use_remove_padding) the texts of a forward pass are packed
one after another into rows without padding (position ids restarting per text, as the actor's
model.use_remove_padding does), the decoder runs on those rows, and the score head reads the same
last token of each text: the same scores to float rounding, no compute on padding. It needs a model
whose decoder keeps packed sequences apart (`posttrain.models.packing.packing_supported`) and whose
head is the `score` layer of transformers' sequence classifiers; otherwise the padded batch runs
and one log line says why.

The final reward is ``function_weight * function_score + rm_weight * rm_score`` (`combine_scores`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch

from posttrain.errors import ConfigError, DataError, ModelError
from posttrain.models.packing import pack_sequences, packing_supported

logger = logging.getLogger(__name__)


class RewardModelScorer:
    """Scores texts with a local sequence-classification reward model; returns (B,) float32 on CPU.

    ``dtype`` is one of fp32, bf16, fp16, auto (as for every model in posttrain). A ``model_dir``
    that is not a local directory raises `ModelError`: posttrain never downloads at run time.

    Texts are tokenized without adding special tokens (a chat template already wrote them), padded
    on the right and, past ``max_length`` tokens (None: never), cut by ``truncation``: ``left`` drops
    the beginning so the end of the response — what the reward model judges — is always kept,
    ``right`` drops the end (verl's legacy reward-model worker), ``error`` raises a DataError (a
    warning says when a text is cut).
    """

    def __init__(
        self,
        model_dir: str,
        *,
        dtype: str = "fp32",
        micro_batch_size: int = 8,
        max_length: int | None = None,
        max_tokens: int | None = None,
        device: str = "cpu",
        trust_remote_code: bool = False,
        external_lib: str | None = None,
        remove_padding: bool = False,
        offload: bool = False,
        truncation: str = "left",
    ):
        """`max_tokens` (reward_model.use_dynamic_bsz with forward_max_token_len_per_gpu): consecutive
        texts share a forward pass while their token counts sum to at most this many (a longer text
        gets a pass of its own) instead of `micro_batch_size` texts per pass. `external_lib` is
        imported first (it may register the model's classes); `trust_remote_code` lets the
        directory's own code run. `offload`: the weights stay on the CPU between passes (see the module)."""
        if micro_batch_size < 1 or (max_length is not None and max_length < 2) or (max_tokens is not None and max_tokens < 1):
            raise ConfigError("reward.reward_model: micro_batch_size must be >= 1, max_length >= 2 (or null), forward_max_token_len_per_gpu >= 1")
        if truncation not in ("left", "right", "error"):
            raise ConfigError(f"reward.reward_model.truncation: {truncation!r} is not one of left, right, error")
        self.model_dir = model_dir
        self.micro_batch_size = micro_batch_size
        self.max_length = max_length
        self.max_tokens = max_tokens
        self.device = torch.device(device)
        self.offload = offload
        home = "cpu" if offload else device  # where the weights wait between passes (on a CPU run: the device)
        self.tokenizer, self.model = _load(model_dir, dtype, home, trust_remote_code, external_lib)
        self.truncation = truncation
        self.tokenizer.truncation_side = "right" if truncation == "right" else "left"
        self._warned_truncation = False
        self.remove_padding = remove_padding and self._packs()

    def _packs(self) -> bool:
        """Whether this model can score packed rows exactly; says once why not."""
        head = getattr(self.model, "score", None)
        if not isinstance(head, torch.nn.Linear):
            why = f"{type(self.model).__name__} has no `score` head"
        elif not packing_supported(self.model):
            why = f"{type(self.model).__name__}'s decoder does not keep packed sequences apart"
        else:
            return True
        logger.warning("reward.reward_model.use_remove_padding: %s; scoring padded batches", why)
        return False

    @torch.no_grad()
    def score_texts(self, texts: list[str]) -> torch.Tensor:
        """Score full texts (prompt and response already joined, in the reward model's format)."""
        scores = []
        with self._weights_on_device():
            for chunk in self._chunks(texts):
                self._check_lengths(chunk)
                scores.append(self._score_packed(chunk) if self.remove_padding else self._score_padded(chunk))
        if not scores:
            return torch.zeros(0)
        return torch.cat(scores)  # (B,)

    @contextlib.contextmanager
    def _weights_on_device(self) -> Iterator[None]:
        """With `offload`, the weights visit the device for one scoring pass and go back to host
        memory after it (also when the pass raises); otherwise they stay where they are."""
        if not self.offload:
            yield
            return
        self.model.to(self.device)
        try:
            yield
        finally:
            self.model.to("cpu")
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # hand the freed weight memory back to the other roles

    def _score_padded(self, chunk: list[str]) -> torch.Tensor:
        encoded = self.tokenizer(chunk, add_special_tokens=False, padding=True, return_tensors="pt",
                                 truncation=self._cuts, max_length=self.max_length if self._cuts else None)
        input_ids = encoded["input_ids"].to(self.device)  # (B, S)
        attention_mask = encoded["attention_mask"].to(self.device)  # (B, S)
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, 1)
        return logits[:, 0].float().cpu()

    def _score_packed(self, chunk: list[str]) -> torch.Tensor:
        ids = self.tokenizer(chunk, add_special_tokens=False, truncation=self._cuts,
                             max_length=self.max_length if self._cuts else None)["input_ids"]
        if not all(ids):
            return self._score_padded(chunk)  # an empty text has no token of its own to score
        pad = self.tokenizer.pad_token_id
        packed = pack_sequences(ids, pad, self.device)
        # No attention mask: transformers keeps the texts apart by their restarting position ids.
        hidden = self.model.base_model(
            input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=None, use_cache=False
        ).last_hidden_state  # (K, W, H)
        # HF's pooling reads the rightmost token that is not the pad id (the first if all are).
        last = torch.tensor([max((j for j, t in enumerate(seq) if t != pad), default=0) for seq in ids], device=self.device)
        pooled = hidden.reshape(-1, hidden.shape[-1])[packed.starts + last]  # (B, H)
        return self.model.score(pooled)[:, 0].float().cpu()

    def _chunks(self, texts: list[str]) -> list[list[str]]:
        """Consecutive texts per forward pass: `micro_batch_size` of them, or by the token budget."""
        if self.max_tokens is None:
            return [texts[i : i + self.micro_batch_size] for i in range(0, len(texts), self.micro_batch_size)]
        lengths = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        if self.max_length is not None:
            lengths = [min(n, self.max_length) for n in lengths]
        chunks: list[list[str]] = []
        used = 0
        for text, n in zip(texts, lengths):
            if chunks and used + n <= self.max_tokens:
                chunks[-1].append(text)
                used += n
            else:
                chunks.append([text])
                used = n
        return chunks

    def score_conversations(self, prompts: list[list[dict[str, Any]]], responses: list[str]) -> torch.Tensor:
        """Score responses to chat prompts, re-templated with the reward model's own chat template.

        The policy and the reward model often use different chat formats; the reward model should
        read the conversation in the format it was trained on, so it is rebuilt from the raw
        messages here rather than reusing the policy's token ids.
        """
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        if not getattr(self.tokenizer, "chat_template", None):
            raise ModelError(
                f"the reward model tokenizer in {self.model_dir} has no chat template; score plain texts"
                " instead or add a chat_template to its tokenizer_config.json"
            )
        texts = [
            self.tokenizer.apply_chat_template(
                list(messages) + [{"role": "assistant", "content": response}], tokenize=False
            )
            for messages, response in zip(prompts, responses)
        ]
        return self.score_texts(texts)

    @property
    def _cuts(self) -> bool:
        """Whether the tokenizer cuts texts longer than max_length (`error` checks them instead)."""
        return self.max_length is not None and self.truncation != "error"

    def _check_lengths(self, texts: list[str]) -> None:
        """Past max_length: raise with `error`, else warn once that texts are being cut."""
        if self.max_length is None or (self._warned_truncation and self.truncation != "error"):
            return
        longest = max(len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"])
        if longest <= self.max_length:
            return
        if self.truncation == "error":
            raise DataError(f"a reward-model input of {longest} tokens is longer than reward.reward_model.max_length "
                            f"({self.max_length}) and reward.reward_model.truncation is error; raise max_length or cut it (left, right)")
        self._warned_truncation = True
        kept = "last" if self.truncation == "left" else "first"
        logger.warning("reward model input of %d tokens was cut to its %s %d (reward.reward_model.max_length)",
                       longest, kept, self.max_length)


def _load(model_dir: str, dtype: str, device: str, trust_remote_code: bool, external_lib: str | None) -> tuple[Any, torch.nn.Module]:
    """Load tokenizer and model from a local directory only; pad right, truncate left (the scorer may
    set the other side)."""
    from posttrain.models.loading import import_external_lib, load_reward_model, load_tokenizer

    import_external_lib(external_lib, key="reward.reward_model.external_lib")  # before the tokenizer: it may register one
    tokenizer = load_tokenizer(model_dir, trust_remote_code=trust_remote_code)  # ModelError for a missing dir; eos stands in for a missing pad
    model = load_reward_model(model_dir, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
    tokenizer.padding_side = "right"
    tokenizer.truncation_side = "left"
    # The model finds the last real token by comparing ids to its pad id; it must be the id we pad with.
    model.config.pad_token_id = tokenizer.pad_token_id
    return tokenizer, model


def combine_scores(
    function_scores: torch.Tensor, rm_scores: torch.Tensor, rm_weight: float = 1.0, function_weight: float = 1.0
) -> torch.Tensor:
    """Final reward = ``function_weight`` × function score + ``rm_weight`` × reward-model score.

    Additive so that a rule reward (e.g. exact-match correctness) keeps its meaning and the reward
    model shapes the rest; the weights set their relative scale (config: ``reward.function_weight``
    and ``reward.reward_model_weight``). ``function_weight=0`` uses the reward model alone, as verl
    does when a reward model is enabled.

    >>> combine_scores(torch.tensor([1.0, 0.0]), torch.tensor([0.5, -2.0]), rm_weight=0.5)
    tensor([ 1.2500, -1.0000])
    """
    if function_scores.shape != rm_scores.shape:
        raise ValueError(
            f"function scores {tuple(function_scores.shape)} and reward-model scores {tuple(rm_scores.shape)} "
            "differ in shape"
        )
    return function_weight * function_scores.float() + rm_weight * rm_scores.float()  # (B,)
