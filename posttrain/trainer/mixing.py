"""Expert rows for the mix losses: SFT examples joined to an RL step's batch (`algorithm.mix`).

Trinity-RFT's `mix` and `mix_chord` algorithm types read expert (SFT) data from an auxiliary buffer
beside the explored experiences and train both in one batch: PPO on the explored rows, likelihood
on the expert rows (posttrain.algorithms.policy_losses_mix). Here the expert files are read as an
SFT dataset (the data section's templating, with the mix section's column keys), drawn
`expert_batch_size` rows per step in a seeded order whose position is checkpointed, and shaped like
the explored batch: each example's tokens before its first trained token are the prompt, the rest
the response (a row's images, algorithm.mix.image_key, sit in its prompt and travel with the row
as an explored row's do, so the actor's and reference's forwards read them); advantages and old
log-probs are zero (the mix losses never read them on expert rows), the reference log-probs are
computed when the batch has them (the KL loss covers every row).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from posttrain.config.schema import Config
from posttrain.data import build_sft_dataset
from posttrain.data.dataset import NO_IMAGES_TEXT_MODEL
from posttrain.data.images import ImageInputs
from posttrain.data.sampler import BatchSampler
from posttrain.errors import ConfigError
from posttrain.records import RolloutBatch

# Fields of an explored batch the expert rows fill with zeros when the batch has them.
_ZERO_FIELDS = ("old_logprobs", "values", "token_level_scores", "token_level_rewards", "advantages", "returns", "sum_pi_squared")


def expert_dataset(cfg: Config, tokenizer: Any, images: ImageInputs | None = None) -> Any:
    """The SFT dataset of `algorithm.mix.expert_files`, read with the data section's settings and
    the mix section's column keys (built and checked before any model is loaded). `images`: the
    vision-language policy's image side (`posttrain.trainer.images.image_inputs`), which reads the
    rows' images (algorithm.mix.image_key); without it a row with images is refused."""
    mix = cfg.algorithm.mix
    keys = {k: getattr(mix, k) for k in ("prompt_key", "response_key", "messages_key", "image_key") if getattr(mix, k) is not None}
    return build_sft_dataset(dataclasses.replace(cfg.data, **keys), mix.expert_files, tokenizer, images=images,
                             images_refused=NO_IMAGES_TEXT_MODEL)


def check_expert_passes(mix: Any, rows: int, total_steps: int) -> None:
    """algorithm.mix.expert_epochs bounds the expert rows a run may draw, rows x epochs, in batches of
    expert_batch_size (Trinity-RFT's expert reader reads that many samples, whole batches only, and
    its trainer stops when a batch can no longer be read); a run of more steps than that is a
    ConfigError naming both numbers, not a run that trains past the end Trinity-RFT stops at."""
    if mix.expert_epochs is None or mix.expert_batch_size < 1:
        return
    steps = rows * mix.expert_epochs // mix.expert_batch_size
    if total_steps > steps:
        raise ConfigError(f"algorithm.mix.expert_epochs: {mix.expert_epochs} pass(es) over the {rows} expert rows give "
                          f"{steps} step(s) of {mix.expert_batch_size} rows, and the stage runs {total_steps}; lower "
                          f"trainer.total_training_steps to {steps} (where Trinity-RFT's trainer stops), raise "
                          "expert_epochs, or set it to null for no limit")


def _split(example: Any) -> tuple[list[int], list[int], list[float]]:
    """(prompt ids, response ids, response loss mask) of an SFT example: the prompt ends where the
    loss first covers a token (the response's first token)."""
    ids, mask = example.input_ids, example.loss_mask
    start = mask.index(1) if 1 in mask else len(ids)
    return ids[:start], ids[start:], [float(m) for m in mask[start:]]


class ExpertRows:
    """Draws expert rows for each step and joins them to the step's batch."""

    def __init__(self, dataset: Any, batch_size: int, pad_id: int, seed: int):
        if len(dataset) < batch_size:
            raise ValueError(f"algorithm.mix.expert_batch_size {batch_size} exceeds the {len(dataset)} expert rows")
        self.dataset, self.pad_id = dataset, pad_id
        self.sampler = BatchSampler(len(dataset), batch_size, seed=seed, shuffle=True, drop_last=True)

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)

    def rows(self, version: int, step: int) -> RolloutBatch:
        """The next `batch_size` expert rows as a RolloutBatch (prompts left-, responses right-padded),
        with their images (`vision`, None when no row has any) as an explored row carries its prompt's."""
        examples = [self.dataset[i] for i in self.sampler.next_batch()]
        parts = [_split(e) for e in examples]
        vision = [getattr(e, "vision", None) for e in examples]  # a data.custom_cls example may not have the field
        p_len = max(len(p) for p, _, _ in parts)
        t_len = max(max(len(r) for _, r, _ in parts), 1)
        n = len(parts)
        prompt_ids = torch.full((n, p_len), self.pad_id, dtype=torch.long)  # (B, P)
        prompt_mask = torch.zeros(n, p_len)
        response_ids = torch.full((n, t_len), self.pad_id, dtype=torch.long)  # (B, T)
        response_mask = torch.zeros(n, t_len)
        loss_mask = torch.zeros(n, t_len)
        for i, (p, r, m) in enumerate(parts):
            if p:
                prompt_ids[i, p_len - len(p):] = torch.tensor(p)
                prompt_mask[i, p_len - len(p):] = 1.0
            response_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            response_mask[i, : len(r)] = 1.0
            loss_mask[i, : len(m)] = torch.tensor(m)  # a conversation trains only its assistant turns
        return RolloutBatch(
            prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids, response_mask=response_mask,
            rollout_logprobs=torch.zeros(n, t_len), weights_version=torch.full((n,), version, dtype=torch.long),
            group_index=[f"expert-s{step}-{i}" for i in range(n)], data_source=["expert"] * n,
            ground_truth=[None] * n, extra_info=[{} for _ in range(n)], raw_prompt=[""] * n, loss_mask=loss_mask,
            vision=vision if any(v is not None for v in vision) else None,
        )

    def join(self, batch: RolloutBatch, step: int, version: int, ref_logprobs: Any = None) -> RolloutBatch:
        """`batch` with the step's expert rows after it and `expert_mask` set on both parts.
        `ref_logprobs(rows)` computes the reference's log-probs when the batch carries them."""
        rows = self.rows(version, step)
        n = len(rows)
        for name in _ZERO_FIELDS:
            if getattr(batch, name) is not None:
                setattr(rows, name, torch.zeros_like(rows.response_mask))
        if batch.ref_logprobs is not None:
            rows.ref_logprobs = ref_logprobs(rows)  # (n, T)
        if batch.rollout_is_weights is not None:
            rows.rollout_is_weights = torch.ones_like(rows.response_mask)
        if batch.reward_baselines is not None:
            rows.reward_baselines = torch.zeros(n)
        rows.raw_chat = None  # the expert rows' chats are not kept (RolloutBatch.cat counts them None)
        batch = dataclasses.replace(batch, loss_mask=batch.train_mask, expert_mask=torch.zeros(len(batch), dtype=torch.bool))
        rows.expert_mask = torch.ones(n, dtype=torch.bool)
        return RolloutBatch.cat([batch, rows])
