"""The actor's top-k distillation term (`actor.topk_kl`): its settings and one micro-batch's value.

The teacher's top-k tokens and log-probs ride on the batch (`RolloutBatch.teacher_topk_*`, from the
reference's `compute_topk`); the actor's forward also gathers the policy's log-probs of those tokens
(`response_logprobs(gather_ids=...)`), and this module turns the two into the term
(posttrain.algorithms.distill_topk), aggregated like the policy loss so that `accumulate_gradients`
weighs it across micro-batches as it weighs every other part of the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from posttrain.algorithms import aggregate_loss, masked_mean, topk_forward_kl
from posttrain.errors import DataError
from posttrain.records import RolloutBatch


@dataclass(frozen=True)
class TopkKLSettings:
    """actor.topk_kl, resolved (see posttrain.config.sections.topk_kl)."""

    k: int
    coef: float = 1.0
    policy_loss: bool = True  # false: the term is the actor's whole loss
    teacher_temperature: float = 1.0
    log_prob_min_clamp: float | None = None
    loss_max_clamp: float | None = None


def topk_kl_term(
    student: Tensor, micro: RolloutBatch, s: TopkKLSettings, mask: Tensor, loss_agg_mode: str, loss_scale_factor: float | None,
) -> tuple[Tensor, dict[str, float]]:
    """`(coef x agg(l_t), metrics)` of one micro-batch: `student` (b, T, K) is the policy's log-probs
    of the teacher's top-k tokens (with gradient), `mask` the trained tokens."""
    kl = topk_forward_kl(student, micro.teacher_topk_logprobs, log_prob_min_clamp=s.log_prob_min_clamp, loss_max_clamp=s.loss_max_clamp)
    loss = aggregate_loss(kl.values, mask, loss_agg_mode, loss_scale_factor=loss_scale_factor)
    metrics = {
        "actor/topk_kl_loss": float(loss.detach()),
        "actor/topk_student_mass": float(masked_mean(kl.student_mass, mask)),
        "actor/topk_teacher_mass": float(masked_mean(kl.teacher_mass, mask)),
    }
    return s.coef * loss, metrics


def check_teacher_ids(ids: Tensor, mask: Tensor, vocab: int) -> None:
    """The teacher's top-k ids must be tokens of the policy's vocabulary (a teacher with a larger
    head proposes tokens the policy cannot score)."""
    real = ids[mask > 0]
    top = int(real.max()) if real.numel() else -1
    if top >= vocab:
        raise DataError(f"actor.topk_kl: the teacher (ref.model_path) ranks token id {top} among its top-k, beyond the policy's "
                        f"vocabulary of {vocab} tokens; the teacher needs the policy's vocabulary (the same tokenizer and head size)")
