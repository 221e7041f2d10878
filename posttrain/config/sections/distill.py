"""`algorithm.distill`: offline knowledge distillation (`algorithm.kind: distill`).

The stage trains the policy on SFT rows (the SFT stage's data and batching) with a loss that mixes
the SFT negative log-likelihood and a divergence between a frozen teacher's next-token distribution
and the student's at the same positions (posttrain.algorithms.distill, posttrain.trainer.distill).
The fields carry ROLL's distillation pipeline names in `refs`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from posttrain.config.access import get_path
from posttrain.config.fields import param, section

OBJECTIVES = ["forward_kl", "reverse_kl", "adaptive_kl", "skewed_forward_kl", "skewed_reverse_kl", "js_divergence"]


@section
class DistillConfig:
    """The teacher and the divergence of a distillation stage (read when algorithm.kind is distill)."""

    teacher_path: str | None = param(None, doc="The teacher model's directory (a Hugging Face causal LM with the policy's tokenizer); it runs forward on the same tokens as the student, without gradients, on each worker. Required by kind distill.", refs=["roll:teacher_pretrain"])
    objective: str = param("forward_kl", doc="Divergence between the teacher's (p) and the student's (q) distributions at each trained position: forward_kl KL(p||q), reverse_kl KL(q||p), adaptive_kl, skewed_forward_kl, skewed_reverse_kl or js_divergence (posttrain.algorithms.distill).", choices=OBJECTIVES, refs=["roll:kd_objective"])
    weight: float = param(0.5, doc="Share of the divergence in the loss: (1 - weight) x SFT NLL + weight x divergence, both token means over the batch's trained tokens; 1 trains on the teacher alone.", ge=0, le=1, refs=["roll:distill_loss_weight"])
    topk: int = param(64, doc="Compare the two distributions on the teacher's k most likely tokens only (both renormalised over them); 0 compares the whole vocabulary.", ge=0, refs=["roll:logits_topk"])
    temperature: float = param(1.0, doc="Both models' logits are divided by it before the divergence (the SFT NLL is not).", gt=0, refs=["roll:kd_temperature"])
    teacher_temperature: float = param(1.0, doc="The teacher's logits are further divided by it (its distribution is softmax(logits / (temperature x teacher_temperature))).", gt=0, refs=["roll:teacher_temperature"])
    adaptive_alpha: float = param(0.5, doc="adaptive_kl: the teacher's tail is its least likely tokens up to this cumulative probability (Wu et al. 2024).", ge=0, le=1, refs=["roll:adaptive_kl_alpha"])
    skew_lambda: float = param(0.1, doc="skewed_forward_kl / skewed_reverse_kl: the weight of the other model in the mixture (Ko et al. 2024).", ge=0, le=1, refs=["roll:skew_lambda"])
    on_prompt: bool = param(False, doc="Train both losses on every real token of a row (prompt included) instead of the response tokens only.", refs=["roll:distill_on_prompt"])


def check_distill(cfg: Any) -> list[str]:
    """A distillation stage needs its teacher; its settings act on that stage kind only."""
    kind = get_path(cfg, "algorithm.kind", "rl")
    if kind == "distill":
        problems = [] if get_path(cfg, "algorithm.distill.teacher_path", None) else [
            "algorithm.kind distill needs algorithm.distill.teacher_path (the teacher model's directory)"]
        sp = get_path(cfg, "actor.ulysses_sequence_parallel_size", 1)
        if sp > 1:
            problems.append(f"actor.ulysses_sequence_parallel_size={sp}: the distillation stage runs whole sequences through the student "
                            "and the teacher on each worker (it compares their full next-token distributions); set it to 1 for this stage")
        return problems
    default = DistillConfig()
    changed = [f"algorithm.distill.{f.name}" for f in dataclasses.fields(DistillConfig)
               if get_path(cfg, f"algorithm.distill.{f.name}", getattr(default, f.name)) != getattr(default, f.name)]
    if changed:
        return [f"{', '.join(changed)}: read only by algorithm.kind distill (this stage is {kind}); set algorithm.kind: distill or leave them at their defaults"]
    return []
