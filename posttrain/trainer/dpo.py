"""The DPO stage: learn from preference pairs against a frozen copy of the starting policy.

One step (Trinity-RFT's `dpo`, ROLL's DPO pipeline, TRL's DPOTrainer):

    batch of data.train_batch_size pairs (prompt, chosen, rejected) -> micro-batches of
    actor.ppo_micro_batch_size_per_gpu pairs -> per micro-batch: one policy forward over the chosen and
    rejected sequences together, one reference forward under inference_mode -> sequence log-probs
    (sums over response tokens) -> per-pair loss, summed and divided by the pairs of the WHOLE batch
    -> backward -> the optimizer step, schedule, validation and final save of `posttrain.trainer.sft.fit`

Reference: the stage's starting model loaded a second time, in eval mode with requires_grad off, so
neither the optimizer nor a stray backward can touch it. The implicit reward of a response is
beta × (log pi(y|x) - log pi_ref(y|x)); metrics report its batch means for both sides, their mean
difference (`margin`) and the share of pairs where chosen out-scores rejected (`accuracy`).
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager, nullcontext
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posttrain.config.sections.algorithm import DPOConfig
from posttrain.data import DPOExample, collate_sft, pad_token_id
from posttrain.models.loading import causal_lm_from_config
from posttrain.models.lora import add_lora, lora_settings
from posttrain.models.precision import autocast
from posttrain.trainer.sequence_logprobs import sequence_logprobs
from posttrain.cluster.fsdp import forward_runner
from posttrain.trainer.preflight import stage_inputs
from posttrain.trainer.sft import Objective, RouterLoss, fit, stage_device
from posttrain.trainer.stage import StageContext, StageResult, open_stage, seed_everything, with_model_path

LOSS_TYPES = ("sigmoid", "ipo", "hinge")


def preference_losses(
    chosen_logprob: Tensor,
    rejected_logprob: Tensor,
    ref_chosen_logprob: Tensor,
    ref_rejected_logprob: Tensor,
    *,
    beta: float,
    label_smoothing: float = 0.0,
    loss_type: str = "sigmoid",
) -> Tensor:
    """Per-pair preference loss (N,) from sequence log-probs (each (N,)).

    With h = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)):
        sigmoid: -(1 - ls) log sigmoid(beta h) - ls log sigmoid(-beta h)
                 (DPO, Rafailov et al. 2023, arXiv:2305.18290; ls > 0 is conservative DPO, Mitchell 2023)
        ipo:     (h - 1 / (2 beta))^2          (IPO, Azar et al. 2023, arXiv:2310.12036)
        hinge:   max(0, 1 - beta h)            (SLiC-HF, Zhao et al. 2023, arXiv:2305.10425)
    Label smoothing applies to sigmoid only (the config check refuses it with the others). The sigmoid
    case equals `posttrain.algorithms.supervised.dpo_loss` per pair; ipo and hinge are not there yet.
    """
    h = (chosen_logprob.float() - ref_chosen_logprob.float()) - (rejected_logprob.float() - ref_rejected_logprob.float())
    if loss_type == "sigmoid":
        z = beta * h
        return -F.logsigmoid(z) * (1.0 - label_smoothing) - F.logsigmoid(-z) * label_smoothing
    if loss_type == "ipo":
        return (h - 1.0 / (2.0 * beta)) ** 2
    if loss_type == "hinge":
        return torch.relu(1.0 - beta * h)
    raise ValueError(f"unknown DPO loss_type {loss_type!r}; choose one of {', '.join(LOSS_TYPES)}")


def pair_logprobs(model: nn.Module, pairs: Sequence[DPOExample], pad_id: int) -> tuple[Tensor, Tensor]:
    """Sequence log-probs (N,) of the chosen and the rejected sides, in one forward over 2N rows."""
    both = collate_sft([p.chosen for p in pairs] + [p.rejected for p in pairs], pad_id)  # (2N, S)
    sums = sequence_logprobs(model, both).sums()  # (2N,)
    return sums[: len(pairs)], sums[len(pairs) :]


def freeze(model: nn.Module) -> nn.Module:
    """Eval mode and no gradients: the reference must stay the starting policy for the whole stage."""
    model.eval()
    model.requires_grad_(False)
    return model


def dpo_objective(
    policy: nn.Module, reference: nn.Module, pad_id: int, settings: DPOConfig,
    policy_dtype: str = "fp32", ref_dtype: str = "fp32", adapters_off: Callable[[], AbstractContextManager] | None = None,
    moe_aux_loss_coef: float | None = 0.0, moe_z_loss_coef: float = 0.0,
) -> Objective:
    """The DPO loss of `settings` over pairs, normalised by the pairs of the whole batch, plus the
    router losses of an MoE policy's forward (`posttrain.trainer.sft.RouterLoss`, actor.moe_aux_loss_coef
    and moe_z_loss_coef).
    `policy_dtype`/`ref_dtype`: actor./ref.fsdp_config.mixed_precision.param_dtype (bf16: autocast).
    Either model may be a sharded model's FSDP root (`posttrain.cluster.fsdp`). `adapters_off`: the
    reference is the policy's own LoRA model run inside this context (peft's `disable_adapter`)."""
    run_policy, policy = forward_runner(policy)
    run_reference, reference = forward_runner(reference)
    base = adapters_off or nullcontext

    def micro_loss(pairs: Sequence[DPOExample], total: float) -> tuple[Tensor, dict[str, float]]:
        # The reference first: when it is the policy's own model, its no-grad forward must not come
        # between the policy's forward and that forward's backward.
        was_training = reference.training
        reference.eval()
        try:
            with torch.inference_mode(), base(), autocast(reference, ref_dtype):
                ref_chosen, ref_rejected = run_reference(pair_logprobs, reference, pairs, pad_id)
        finally:
            reference.train(was_training)
        ref_chosen, ref_rejected = ref_chosen.clone(), ref_rejected.clone()  # usable by autograd
        with autocast(policy, policy_dtype):
            chosen, rejected = run_policy(pair_logprobs, policy, pairs, pad_id)  # (N,) each
        losses = preference_losses(
            chosen, rejected, ref_chosen, ref_rejected,
            beta=settings.beta, label_smoothing=settings.label_smoothing, loss_type=settings.loss_type,
        )  # (N,)
        loss = losses.sum() / total
        chosen_reward = settings.beta * (chosen.detach() - ref_chosen)  # (N,)
        rejected_reward = settings.beta * (rejected.detach() - ref_rejected)  # (N,)
        parts = {
            "loss": float(loss.detach()),
            "accuracy": float((chosen_reward > rejected_reward).float().sum()) / total,
            "margin": float((chosen_reward - rejected_reward).sum()) / total,
            "chosen_reward": float(chosen_reward.sum()) / total,
            "rejected_reward": float(rejected_reward.sum()) / total,
            # The policy's own preference, ref aside: at the start `accuracy` is 0 (every margin ties at
            # 0), while this one shows where the starting model already stood.
            "logp_accuracy": float((chosen.detach() > rejected.detach()).float().sum()) / total,
            "chosen_logp": float(chosen.detach().sum()) / total,
            "rejected_logp": float(rejected.detach().sum()) / total,
        }
        return loss, parts

    def tokens(pairs: Sequence[DPOExample]) -> int:
        return sum(len(p.chosen.input_ids) + len(p.rejected.input_ids) for p in pairs)

    return Objective("dpo", lambda pairs: float(max(len(pairs), 1)), micro_loss, tokens, RouterLoss.of(policy, moe_aux_loss_coef, moe_z_loss_coef))


def run_dpo(ctx: StageContext) -> StageResult:
    """DPO stage: policy and frozen reference both start from ctx.model_path; train on the pairs of
    data.train_files, validate (preference loss/accuracy) on data.val_files, save the final policy."""
    ctx = dataclasses.replace(ctx, cfg=with_model_path(ctx.cfg, ctx.model_path))  # saved as run
    cfg = ctx.cfg
    seed_everything(cfg.trainer.seed)
    inputs = ctx.inputs or stage_inputs(cfg)  # every check before training (posttrain.trainer.preflight)
    tokenizer, train_set, val_set = inputs.tokenizer, inputs.train_set, inputs.val_set
    device = stage_device(ctx)
    model = causal_lm_from_config(cfg.model, device=device)
    lora = lora_settings(cfg.model, "model")
    adapters = add_lora(model, lora, cfg.model.path) if lora is not None else None
    policy = ctx.world.shard(model, cfg.actor.fsdp_config)
    # With LoRA the reference is the policy's base weights (adapters off): no second copy.
    reference = policy if adapters is not None else ctx.world.shard(freeze(causal_lm_from_config(cfg.model, device=device)), cfg.ref.fsdp_config)
    derived, trackers = open_stage(ctx, len(train_set))
    objective = dpo_objective(
        policy, reference, pad_token_id(tokenizer), cfg.algorithm.dpo,
        cfg.actor.fsdp_config.mixed_precision.param_dtype, cfg.ref.fsdp_config.mixed_precision.param_dtype,
        adapters_off=adapters.disable_adapter if adapters is not None else None, moe_aux_loss_coef=cfg.actor.moe_aux_loss_coef,
        moe_z_loss_coef=cfg.actor.moe_z_loss_coef,
    )
    return fit(ctx, policy, tokenizer, objective, train_set, val_set, derived, trackers)
