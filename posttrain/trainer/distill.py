"""The distillation stage (`algorithm.kind: distill`): SFT rows, a frozen teacher, a divergence.

One step is the SFT stage's (posttrain.trainer.sft: same data, batching, accumulation, optimizer,
validation and saving); only the micro-batch loss differs. For each micro-batch:

    student forward (with gradients) and teacher forward (no gradients) on the same right-padded
    tokens -> at every trained position s (it predicts token s + 1): the student's NLL of that
    token, and the divergence between the teacher's (top-k) distribution and the student's
    (posttrain.algorithms.distill) -> (1 - w) x sum NLL / N + w x sum divergence / N,

N being the trained tokens of the whole batch (all ranks), as in SFT, so the loss is the batch's
token mean whatever the micro-batch split. With algorithm.distill.on_prompt every real token but
the first is a trained position (ROLL's distill_on_prompt). Each worker runs the teacher on its own
micro-batches, so the 2-process path needs nothing more than SFT's.

Rows with images (a vision-language student and teacher, Qwen2-VL / Qwen2.5-VL: data.image_key read
by the student's image processor, as ROLL's vision-language distillation reads them through the
model's processor) run both forwards with the row's images: the vision tower's features at the
row's ``<|image_pad|>`` tokens before its first trained token, M-RoPE positions
(posttrain.models.vision). The teacher reads the same patches. A micro-batch without images runs
the text forward, exactly as before.

Validation reports the same two parts (val/distill/nll, val/distill/divergence).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from posttrain.algorithms.distill import distill_loss, get_divergence, student_logits_at, teacher_targets
from posttrain.cluster.fsdp import forward_runner
from posttrain.config.sections.distill import DistillConfig
from posttrain.data import SequenceBatch, SFTExample, collate_sft, pad_token_id
from posttrain.config.schema import Config
from posttrain.models.loading import causal_lm_from_config
from posttrain.models.logprobs import head_chunk_rows, lm_head_logits
from posttrain.models.lora import add_lora, lora_settings
from posttrain.models.precision import autocast
from posttrain.models.vision import has_images, hidden_states_with_images
from posttrain.records import VisionInputs
from posttrain.trainer.preflight import stage_inputs
from posttrain.trainer.sft import Objective, fit, stage_device
from posttrain.trainer.stage import StageContext, StageResult, open_stage, seed_everything, with_model_path


def trained_mask(batch: SequenceBatch, on_prompt: bool) -> Tensor:
    """(B, S-1): 1 where position s predicts a trained token s + 1 (every real token with on_prompt)."""
    source = batch.attention_mask.float() if on_prompt else batch.loss_mask
    return source[:, 1:]


def image_mask(model: nn.Module, batch: SequenceBatch, vision: Sequence[VisionInputs | None], width: int) -> Tensor:
    """(B, width) bool: the ``<|image_pad|>`` tokens the rows' images fill. Only rows with images,
    and only before each row's first trained token (the dataset puts every image there, and refuses
    a row that has one later), so the same token written in a reply stays text."""
    ids = batch.input_ids[:, :width]  # (B, S)
    before_loss = batch.loss_mask[:, :width].cumsum(-1) == 0  # (B, S)
    with_images = torch.tensor([v is not None for v in vision]).unsqueeze(-1)  # (B, 1)
    return (ids == model.config.image_token_id) & before_loss & with_images


def _hidden(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, vision: Sequence[VisionInputs | None] | None = None,
            images: Tensor | None = None) -> Tensor:
    """Final-norm hidden states (B, S, H); with `vision`, the images fill the `images` (B, S) tokens."""
    if vision is not None:
        return hidden_states_with_images(model, input_ids, attention_mask, vision, images.to(input_ids.device))
    return model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state  # (B, S, H)


def _chunk_sums(student: nn.Module, teacher: nn.Module, hidden: Tensor, teacher_hidden: Tensor, targets: Tensor,
                dcfg: DistillConfig) -> tuple[Tensor, Tensor]:
    """(sum NLL, sum divergence) of n positions: hidden (n, H) of each model, targets (n,)."""
    logits = lm_head_logits(student, hidden)  # (n, V)
    with torch.no_grad():
        teacher_logits = lm_head_logits(teacher, teacher_hidden)  # (n, V')
    # The two heads may pad the vocabulary differently: compare the ids both have (ROLL cuts the
    # teacher's to the tokenizer's vocab_size instead, which also drops added tokens: docs/data.md)
    vocab = min(logits.shape[-1], teacher_logits.shape[-1])
    nll = -torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (n,)
    target = teacher_targets(teacher_logits[:, :vocab], topk=dcfg.topk, temperature=dcfg.temperature,
                             teacher_temperature=dcfg.teacher_temperature)
    divergence = get_divergence(dcfg.objective)(
        student_logits_at(logits[:, :vocab], target), target, temperature=dcfg.temperature,
        adaptive_alpha=dcfg.adaptive_alpha, skew_lambda=dcfg.skew_lambda)  # (n,)
    return nll.sum(), divergence.sum()


def distill_sums(student: nn.Module, teacher: nn.Module, batch: SequenceBatch, dcfg: DistillConfig,
                 *, chunk_tokens: int | None = None, vision: Sequence[VisionInputs | None] | None = None,
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """(sum of the student's NLL, sum of the divergence, trained positions) over `batch`;
    `vision`: each row's images (None: a text row), read by both forwards (module docstring).

    The heads run on `chunk_tokens` positions at a time (default: as many as keep one chunk's
    logits under posttrain.models.logprobs.MAX_CHUNK_ELEMENTS), each chunk recomputed in the
    backward when there are several, so no (N, V) logits of the whole micro-batch are kept."""
    device = next(student.parameters()).device
    width = int(batch.attention_mask.sum(-1).max())  # columns that are padding in every row are cut
    input_ids = batch.input_ids[:, :width].to(device)  # (B, S)
    attention_mask = batch.attention_mask[:, :width].to(device)  # (B, S)
    real = trained_mask(batch, dcfg.on_prompt)[:, : width - 1].to(device) > 0  # (B, S-1)
    targets = input_ids[:, 1:][real]  # (N,)
    vision = vision if has_images(vision) else None
    images = None if vision is None else image_mask(student, batch, vision, width)  # (B, S): both read the student's ids
    hidden = _hidden(student, input_ids, attention_mask, vision, images)[:, :-1][real]  # (N, H)
    with torch.no_grad():
        teacher_hidden = _hidden(teacher, input_ids, attention_mask, vision, images)[:, :-1][real]  # (N, H')
    step = head_chunk_rows(student, chunk_tokens)
    recompute = torch.is_grad_enabled() and hidden.requires_grad and hidden.shape[0] > step
    nll, div = hidden.new_zeros((), dtype=torch.float32), hidden.new_zeros((), dtype=torch.float32)
    # at least one (possibly empty) chunk, so the backward reaches the head on every rank (sharded models)
    for start in range(0, max(hidden.shape[0], 1), step):
        parts = (hidden[start : start + step], teacher_hidden[start : start + step], targets[start : start + step])
        if recompute:
            n, d = checkpoint(lambda h, t, y: _chunk_sums(student, teacher, h, t, y, dcfg), *parts, use_reentrant=False)
        else:
            n, d = _chunk_sums(student, teacher, *parts, dcfg)
        nll, div = nll + n, div + d
    return nll, div, real.sum()


def distill_objective(model: nn.Module, teacher: nn.Module, pad_id: int, dcfg: DistillConfig, compute_dtype: str = "fp32") -> Objective:
    """The mixed loss of the module docstring. `model` may be a sharded model's FSDP root."""
    run, inner = forward_runner(model)

    def normaliser(examples: Sequence[SFTExample]) -> float:
        if dcfg.on_prompt:
            return float(max(sum(len(e.input_ids) - 1 for e in examples), 1))
        return float(max(sum(sum(e.loss_mask[1:]) for e in examples), 1))  # the first token has no predictor

    def micro_loss(examples: Sequence[SFTExample], total: float) -> tuple[Tensor, dict[str, float]]:
        with autocast(inner, compute_dtype):
            nll, div, tokens = run(distill_sums, inner, teacher, collate_sft(examples, pad_id), dcfg,
                                   vision=[e.vision for e in examples])
        loss = distill_loss(nll, div, total, dcfg.weight)
        return loss, {"loss": float(loss.detach()), "nll": float(nll.detach()) / total,
                      "divergence": float(div.detach()) / total, "tokens": float(tokens)}

    return Objective("distill", normaliser, micro_loss, lambda examples: sum(len(e.input_ids) for e in examples))


def load_teacher(cfg: Config, device: torch.device) -> nn.Module:
    """The frozen teacher, loaded with the policy's model options (dtype, attention kernel, ...)
    from algorithm.distill.teacher_path (checked by posttrain.trainer.preflight)."""
    settings = dataclasses.replace(cfg.model, path=cfg.algorithm.distill.teacher_path, enable_gradient_checkpointing=False)
    return causal_lm_from_config(settings, device=device).eval().requires_grad_(False)


def run_distill(ctx: StageContext) -> StageResult:
    """Distillation stage: start from ctx.model_path, train on data.train_files' rows against the
    teacher at algorithm.distill.teacher_path, save the final policy (as run_sft)."""
    ctx = dataclasses.replace(ctx, cfg=with_model_path(ctx.cfg, ctx.model_path))
    cfg = ctx.cfg
    seed_everything(cfg.trainer.seed)
    inputs = ctx.inputs or stage_inputs(cfg)
    device = stage_device(ctx)
    policy = causal_lm_from_config(cfg.model, device=device)
    lora = lora_settings(cfg.model, "model")
    if lora is not None:
        add_lora(policy, lora, cfg.model.path)
    model = ctx.world.shard(policy, cfg.actor.fsdp_config)
    teacher = load_teacher(cfg, device)
    derived, trackers = open_stage(ctx, len(inputs.train_set))
    objective = distill_objective(model, teacher, pad_token_id(inputs.tokenizer), cfg.algorithm.distill,
                                  cfg.actor.fsdp_config.mixed_precision.param_dtype)
    return fit(ctx, model, inputs.tokenizer, objective, inputs.train_set, inputs.val_set, derived, trackers)

