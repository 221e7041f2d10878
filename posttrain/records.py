"""Typed batch records that flow between roles: prompts to the rollout engine, rollouts to the rest.

Every field is named and shape-documented (letters as in CONTRIBUTING.md). Row-aligned fields are
either tensors whose first dimension is the batch `B`, or Python lists of length `B` for per-sample
values that are not tensors (group ids, data source, ground truth, extra info). Optional tensor
fields start as `None` and are filled by later stages of the RL step.

Why plain dataclasses and not tensordict's `@tensorclass`: tensorclass stores list fields as a
`NonTensorStack`, and in tensordict 0.15 that made every row operation slow and surprising. Measured
on 2 CPU cores with 6 tensor fields and 4 list fields, indexing 64 of 128 rows took 3.8 ms against
0.06 ms for the same record without list fields (56 ms vs 0.3 ms at 1,024 rows), so a token-budget
split of one step's batch would spend more time in bookkeeping than a tiny model's forward. Lists
came back as `tensordict.utils.LinkedList`, and concatenating two records whose integer field
differed silently turned the integer into a list. The semantics of non-tensor stacks have also
changed between tensordict releases (0.6 to 0.15). The operations RL needs
(index, split, cat with padding, repeat per response, move to a device) take ~100 lines here and
behave the same on every version, so we own them, and posttrain does not depend on tensordict.

Masks are float (1.0 real token, 0.0 padding) so that masked reductions are plain multiplications.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

import torch
from torch import Tensor

R = TypeVar("R", bound="_Rows")
Index = int | slice | Sequence[int] | Tensor

# Field metadata: which side a 2-D tensor field is padded on when records of different lengths are
# concatenated. Prompts are left-padded, responses right-padded (CONTRIBUTING.md).
LEFT = {"pad": "left"}
RIGHT = {"pad": "right"}
# A per-row list field that a batch may leave None (no row has a value): concatenated with batches
# that set it, its rows count as None (text rows joining image rows, posttrain.models.vision).
OPTIONAL_ROWS = {"optional_rows": True}


@dataclass(frozen=True)
class VisionInputs:
    """One prompt's images and videos as the vision tower takes them (`posttrain.models.vision`): the
    patches of every image of the row, in the order their placeholders appear, and likewise of its
    videos (`posttrain.data.videos`). A row without images holds (0, D) patches and a (0, 3) grid."""

    pixel_values: Tensor  # (N, D) float: N patches of all the row's images, D = channels x patch volume
    image_grid_thw: Tensor  # (I, 3) long: temporal, height, width patches of each of the row's I images
    pixel_values_videos: Tensor | None = None  # (M, D) float: the patches of all the row's videos
    video_grid_thw: Tensor | None = None  # (V, 3) long: temporal, height, width patches of each video
    # (V,) float: seconds one temporal patch of each video spans (Qwen2.5-VL's M-RoPE time axis)
    second_per_grid_ts: Tensor | None = None
    # (K,) long: where the images' tokens sit, as offsets from the row's first real token, when they are
    # not simply every <|image_pad|> of the prompt: an agent episode's observation images come after
    # model tokens, and a pad token the model sampled is text (posttrain.rollout.episode_images)
    image_positions: Tensor | None = None


class _Rows:
    """Row operations shared by the batch records, driven by `dataclasses.fields`."""

    def __len__(self) -> int:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                return value.shape[0]
        raise TypeError(f"{type(self).__name__} has no tensor field")

    def __post_init__(self) -> None:
        # Catch misaligned fields where they are made, not three stages later.
        rows = len(self)
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None:
                continue
            n = value.shape[0] if isinstance(value, Tensor) else len(value)
            if n != rows:
                raise ValueError(f"{type(self).__name__}.{f.name} has {n} rows, expected {rows}")

    def _map(self: R, on_tensor: Any, on_list: Any) -> R:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None:
                out[f.name] = None
            elif isinstance(value, Tensor):
                out[f.name] = on_tensor(value)
            else:
                out[f.name] = on_list(value)
        return type(self)(**out)

    def __getitem__(self: R, index: Index) -> R:
        """Rows by slice, integer list, long tensor or bool mask. An int keeps the batch dimension."""
        if isinstance(index, int):
            index = slice(index, index + 1 if index != -1 else None)
        if isinstance(index, slice):
            return self._map(lambda t: t[index], lambda xs: list(xs[index]))
        rows = torch.as_tensor(index)
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()
        rows_list = rows.tolist()
        return self._map(lambda t: t[rows.to(t.device)], lambda xs: [xs[i] for i in rows_list])

    def split(self: R, size: int) -> list[R]:
        """Consecutive micro-batches of `size` rows (the last one may be smaller)."""
        if size < 1:
            raise ValueError(f"split size must be >= 1, got {size}")
        return [self[i : i + size] for i in range(0, len(self), size)]

    def repeat_interleave(self: R, n: int) -> R:
        """Each row `n` times in a row: prompts -> their `n` responses, kept adjacent per group."""
        return self[torch.arange(len(self)).repeat_interleave(n)]

    def to(self: R, device: torch.device | str) -> R:
        return self._map(lambda t: t.to(device), lambda xs: xs)

    @classmethod
    def cat(cls: type[R], batches: Sequence[R]) -> R:
        """Concatenate rows. 2-D tensor fields of different lengths are padded on their own side."""
        if not batches:
            raise ValueError("cat needs at least one batch")
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            values = [getattr(b, f.name) for b in batches]
            present = [v is not None for v in values]
            if not any(present):
                out[f.name] = None
            elif not all(present) and f.metadata.get("optional_rows"):
                out[f.name] = [x for b, v in zip(batches, values) for x in (v if v is not None else [None] * len(b))]
            elif not all(present):
                raise ValueError(f"cat: field {f.name!r} is set in some batches and None in others")
            elif isinstance(values[0], Tensor):
                out[f.name] = _cat_padded(values, f.metadata.get("pad", "right"))
            else:
                out[f.name] = [x for v in values for x in v]
        return cls(**out)


def _pad_to(t: Tensor, width: int, side: str) -> Tensor:
    """Zero-pad dim 1 of `t` to `width` on `side` (masks are 0 there, so padded ids may be 0)."""
    gap = width - t.shape[1]
    if gap == 0:
        return t
    pad = (0, 0) * (t.dim() - 2) + ((gap, 0) if side == "left" else (0, gap))
    return torch.nn.functional.pad(t, pad)


def _cat_padded(tensors: list[Tensor], side: str) -> Tensor:
    """Concatenate along dim 0, padding dim 1 to the longest on the field's own side."""
    if tensors[0].dim() < 2:
        return torch.cat(tensors)
    width = max(t.shape[1] for t in tensors)
    return torch.cat([_pad_to(t, width, side) for t in tensors])


@dataclass
class PromptBatch(_Rows):
    """Prompts to sample from, one row per prompt, left-padded so all prompts end in the same column.

    The data pipeline's `collate_prompts` builds it directly (one type from dataset to engine)."""

    input_ids: Tensor = field(metadata=LEFT)  # (B, P) long
    attention_mask: Tensor = field(metadata=LEFT)  # (B, P) float, 1.0 on real tokens
    uid: list[str] = field(default_factory=list)  # unique id per prompt; becomes the group index
    data_source: list[str] = field(default_factory=list)
    ground_truth: list[Any] = field(default_factory=list)
    extra_info: list[dict[str, Any]] = field(default_factory=list)
    raw_prompt: list[str | None] = field(default_factory=list)  # templated text (data.return_full_prompt)
    index: list[int] = field(default_factory=list)  # the dataset row each prompt comes from
    raw_chat: list[Any] = field(default_factory=list)  # messages before the template (data.return_raw_chat)
    vision: list[VisionInputs | None] = field(default_factory=list)  # each prompt's images, None for a text row

    def __post_init__(self) -> None:
        # Per-sample lists may be left empty by callers that do not have them (tests, benchmarks).
        rows = self.input_ids.shape[0]
        fills = {
            "uid": lambda: [str(i) for i in range(rows)],
            "index": lambda: list(range(rows)),
            "extra_info": lambda: [{} for _ in range(rows)],
        }
        for name in ("uid", "data_source", "ground_truth", "extra_info", "raw_prompt", "index", "raw_chat", "vision"):
            if len(getattr(self, name)) == 0 and rows:
                setattr(self, name, fills.get(name, lambda: [None] * rows)())
        super().__post_init__()


@dataclass
class RolloutBatch(_Rows):
    """Prompts with one sampled response each, plus the tensors later stages of the RL step add.

    Rows of the same prompt share `group_index` (the prompt's uid) and sit next to each other.
    Every `(B, T)` tensor is aligned with `response_ids`: column `t` belongs to response token `t`.
    """

    prompt_ids: Tensor = field(metadata=LEFT)  # (B, P) long, left-padded
    prompt_mask: Tensor = field(metadata=LEFT)  # (B, P) float
    response_ids: Tensor = field(metadata=RIGHT)  # (B, T) long, right-padded after EOS
    response_mask: Tensor = field(metadata=RIGHT)  # (B, T) float, 1.0 up to and including EOS
    rollout_logprobs: Tensor = field(metadata=RIGHT)  # (B, T) log pi(token) as the sampler saw it
    weights_version: Tensor  # (B,) long: the policy version that sampled each row
    group_index: list[str]  # uid of the prompt each row answers
    data_source: list[str]
    ground_truth: list[Any]
    extra_info: list[dict[str, Any]]
    raw_prompt: list[str]
    # Filled by later stages; all (B, T) float and aligned with response_ids.
    old_logprobs: Tensor | None = field(default=None, metadata=RIGHT)
    ref_logprobs: Tensor | None = field(default=None, metadata=RIGHT)
    values: Tensor | None = field(default=None, metadata=RIGHT)
    token_level_scores: Tensor | None = field(default=None, metadata=RIGHT)
    token_level_rewards: Tensor | None = field(default=None, metadata=RIGHT)
    advantages: Tensor | None = field(default=None, metadata=RIGHT)
    returns: Tensor | None = field(default=None, metadata=RIGHT)
    # Rollout importance sampling (posttrain.algorithms.rollout_correction): per-token loss weights
    # of the policy loss, and the tokens the losses and advantages count when some were rejected.
    # `loss_mask` never replaces response_mask, which also tells the forward where the tokens are.
    rollout_is_weights: Tensor | None = field(default=None, metadata=RIGHT)
    loss_mask: Tensor | None = field(default=None, metadata=RIGHT)
    # sum_v pi(v)^2 of the policy before its update (actor.calculate_sum_pi_squared, or an estimator's need).
    sum_pi_squared: Tensor | None = field(default=None, metadata=RIGHT)
    # A teacher's k most likely tokens at each response position and their log-probs (B, T, K), for
    # the top-k distillation term (actor.topk_kl); 0 on padding. None otherwise.
    teacher_topk_logprobs: Tensor | None = field(default=None, metadata=RIGHT)
    teacher_topk_ids: Tensor | None = field(default=None, metadata=RIGHT)
    # (B,) float: score of a greedy response to the row's prompt, for estimators that need one (ReMax).
    reward_baselines: Tensor | None = None
    # (B, K) float: the reward function's named components of each response (algorithm.gdpo_reward_keys,
    # the keys of its returned dict), which the gdpo estimator normalises one by one; None otherwise.
    reward_components: Tensor | None = None
    # (B,) bool: True on expert (SFT) rows joined to the batch for the mix losses (posttrain.trainer.mixing).
    expert_mask: Tensor | None = None
    # The prompt's chat messages before the template (data.return_raw_chat), else None per row: a
    # reward model re-templates them in its own chat format. Rows joined from elsewhere (expert rows,
    # the self-judge's replies) may carry none: concatenated, theirs count as None.
    raw_chat: list[Any] | None = field(default=None, metadata=OPTIONAL_ROWS)
    # Each row's prompt images (posttrain.models.vision), None for a text row; None when no row has any.
    vision: list[VisionInputs | None] | None = field(default=None, metadata=OPTIONAL_ROWS)
    # (B,) bool: the row was still being generated at its call's deadline (SamplingParams.deadline) and
    # was cut there, unfinished (neither a stop nor its length budget ended it); None without a deadline.
    # The explorer consumes it (posttrain.trainer.deadlines) and clears it before the batch trains.
    timed_out: Tensor | None = None
    # (B,) bool: of the rows `timed_out` flags, those cut by over-rollout's deadline (SamplingParams.
    # over_rollout: enough of the call's groups had finished) rather than the fixed one; None without
    # over-rollout. Cleared with `timed_out`.
    over_rolled: Tensor | None = None
    # Routing replay (actor.router_replay.mode R2, posttrain.models.router_replay): the experts each MoE
    # layer chose for every real token in the old-log-prob forward, (B, S, L, K) uint8/int32 with row b's
    # j-th real token (prompt then response) at [b, j], right-padded: no pad side, trimming keeps it whole.
    routes: Tensor | None = None

    @property
    def attention_mask(self) -> Tensor:
        return torch.cat([self.prompt_mask, self.response_mask], dim=1)  # (B, S)

    @property
    def train_mask(self) -> Tensor:
        """(B, T) the response tokens losses, their normalisers and advantages count: `loss_mask`
        when rollout correction rejected some, else `response_mask`."""
        return self.response_mask if self.loss_mask is None else self.loss_mask

    def seq_lengths(self) -> Tensor:
        """Real (prompt + response) tokens per row."""
        return (self.prompt_mask.sum(1) + self.response_mask.sum(1)).long()  # (B,)

    def num_tokens(self) -> int:
        """Real prompt + response tokens in the batch (what a padding-free forward would process)."""
        return int(self.seq_lengths().sum())

    def num_response_tokens(self) -> int:
        """Real response tokens: the denominator of token-mean loss aggregation."""
        return int(self.response_mask.sum())

    def trim(self) -> RolloutBatch:
        """Drop prompt columns that are padding in every row (left) and response columns likewise
        (right), so a micro-batch of short sequences is not computed at the whole batch's width."""
        p_used = self.prompt_mask.sum(0) > 0
        t_used = self.response_mask.sum(0) > 0
        p0 = int(p_used.float().argmax()) if p_used.any() else self.prompt_mask.shape[1] - 1
        t1 = int(t_used.nonzero().max()) + 1 if t_used.any() else 1
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            side = f.metadata.get("pad")
            if side == "left":
                value = value[:, p0:] if value is not None else None
            elif side == "right":
                value = value[:, :t1] if value is not None else None
            out[f.name] = value
        return RolloutBatch(**out)

    @classmethod
    def sampled(
        cls, rows: PromptBatch, response_ids: Tensor, response_mask: Tensor, rollout_logprobs: Tensor, version: int,
    ) -> RolloutBatch:
        """What a rollout engine returns: `rows` (one prompt per response, on the responses' device)
        with their sampled responses (B, T), masks and log-probs, and the weights version that sampled them."""
        device = response_ids.device
        return cls(
            prompt_ids=rows.input_ids.to(device),
            prompt_mask=rows.attention_mask.to(device, torch.float32),
            response_ids=response_ids,
            response_mask=response_mask,
            rollout_logprobs=rollout_logprobs,
            weights_version=torch.full((len(rows),), version, dtype=torch.long, device=device),
            group_index=list(rows.uid),
            data_source=list(rows.data_source),
            ground_truth=list(rows.ground_truth),
            extra_info=[dict(x) if x else {} for x in rows.extra_info],
            raw_prompt=list(rows.raw_prompt),
            raw_chat=list(rows.raw_chat),
            vision=list(rows.vision) if any(v is not None for v in rows.vision) else None,
        )

    def split_by_tokens(self, max_tokens: int) -> MicroBatches:
        """Dynamic batch size: micro-batches each costing at most `max_tokens` when run trimmed.

        The cost of a trimmed micro-batch is rows x (longest prompt + longest response), which is
        what a padded forward really computes and is never less than its real token count. Rows are
        sorted by length (longest first) and packed greedily, so each micro-batch holds rows of
        similar length and wastes little padding. `MicroBatches.restore` undoes the reordering.
        """
        p_len = self.prompt_mask.sum(1).long().tolist()
        t_len = self.response_mask.sum(1).long().tolist()
        order = sorted(range(len(self)), key=lambda i: -(p_len[i] + t_len[i]))
        if order and p_len[order[0]] + t_len[order[0]] > max_tokens:
            longest = p_len[order[0]] + t_len[order[0]]
            raise ValueError(
                f"a sequence of {longest} tokens does not fit max_tokens={max_tokens}; "
                "the token budget must be at least max prompt length + max response length"
            )

        def padded(rows: Sequence[int]) -> int:  # rows x (longest prompt + longest response): a trimmed forward's cost
            return len(rows) * (max(p_len[i] for i in rows) + max(t_len[i] for i in rows))

        groups = pack_greedy(order, max_tokens, padded)
        index = torch.tensor([i for g in groups for i in g], dtype=torch.long)  # (B,)
        return MicroBatches([self[g].trim() for g in groups], index)


def pack_greedy(order: Sequence[int], max_tokens: int, cost: Callable[[Sequence[int]], int]) -> list[list[int]]:
    """Items taken in `order`, packed greedily into micro-batches whose `cost` stays within `max_tokens`.

    The next item joins the current group unless the group with it would cost more than the budget;
    then it starts a new group. A group always holds at least one item, so an item that alone
    exceeds the budget gets a group of its own (callers that must refuse it check first). One packer
    for both kinds of batch, each with its own cost: a rollout batch's groups cost their padded
    rectangle (`RolloutBatch.split_by_tokens`, rows sorted longest first), an SFT/DPO batch's cost
    its real tokens, in the sampler's order (`posttrain.trainer.sft.MicroBatching`).

    >>> pack_greedy([0, 1, 2, 3], 5, lambda g: sum([3, 2, 4, 1][i] for i in g))
    [[0, 1], [2, 3]]
    """
    groups: list[list[int]] = []
    for item in order:
        if groups and cost([*groups[-1], item]) <= max_tokens:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


@dataclass
class MicroBatches:
    """Micro-batches cut from one batch in some order; `index[k]` is the source row of output row k."""

    batches: list[RolloutBatch]
    index: Tensor  # (B,) long: the concatenated micro-batch rows are `batch[index]`

    def restore(self, per_row: Sequence[Tensor], width: int | None = None) -> Tensor:
        """Per-micro-batch results (each (b_i, ...)) back into the original row order of the batch.

        Results of different widths (trimmed micro-batches) are right-padded with zeros, which is
        where response-aligned values belong; pass `width=T` to get the untrimmed batch's width.
        """
        parts = list(per_row)
        if width is not None and parts[0].dim() >= 2:
            parts = [_pad_to(p, width, "right") for p in parts]
        stacked = _cat_padded(parts, "right")
        out = torch.empty_like(stacked)
        out[self.index.to(stacked.device)] = stacked
        return out
