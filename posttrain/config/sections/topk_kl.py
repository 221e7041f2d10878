"""`actor.topk_kl`: on-policy distillation by a supervised top-k forward KL to a teacher.

The teacher is the reference model: `ref.model_path` names it (else the reference is the policy's
starting weights, and the term keeps the policy near them). At every response token the teacher's
k most likely next tokens and their log-probs are compared with the policy's log-probs of the same
tokens (posttrain.algorithms.distill_topk), and the term is added to the actor's loss, aggregated
with actor.loss_agg_mode. With `policy_loss: false` it is the actor's whole loss (no policy gradient,
entropy bonus or KL loss): the student learns from its teacher on its own samples alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from posttrain.config.access import get_path, is_rl, reference_crew_devices
from posttrain.config.fields import param, section


@section
class TopkKLConfig:
    """A supervised top-k forward KL from the teacher (the reference model) to the policy in the actor's loss."""

    k: int = param(0, doc="The teacher's most likely tokens compared at each response token; 0: off (no term, the teacher computes no top-k).", ge=0)
    coef: float = param(1.0, doc="Weight of the term in the actor's loss: loss += coef x agg_t(l_t), aggregated like the policy loss (actor.loss_agg_mode) over the trained response tokens; logged as actor/topk_kl_loss, with actor/topk_student_mass and actor/topk_teacher_mass (the probability each puts on the teacher's top-k).", ge=0)
    policy_loss: bool = param(True, doc="Keep the rest of the actor's loss (policy gradient, entropy bonus, KL loss, SFT and TOPR terms). false: the term is the whole loss (pure on-policy distillation: the responses' rewards and advantages are computed and logged, and train nothing).")
    teacher_temperature: float = param(1.0, doc="The teacher's logits are divided by it before its softmax (the policy's by the rollout temperature, the distribution it samples from).", gt=0)
    log_prob_min_clamp: float | None = param(None, doc="Raise both sides' log-probs to at least this value before the KL (a token the policy gives almost no mass then has no gradient); null: no floor.")
    loss_max_clamp: float | None = param(None, doc="Cap each token's KL value at this; null: no cap.", gt=0)


def check_topk_kl(cfg: Any) -> list[str]:
    """What the top-k term needs: an RL stage whose reference runs on the trainer workers, plain LM
    heads of one process, and, as the whole loss, no other term set."""
    k = get_path(cfg, "actor.topk_kl.k", 0)
    if not k:
        default = TopkKLConfig()
        changed = [f"actor.topk_kl.{f.name}" for f in dataclasses.fields(TopkKLConfig) if f.name != "k"
                   and get_path(cfg, f"actor.topk_kl.{f.name}", getattr(default, f.name)) != getattr(default, f.name)]
        return [f"{', '.join(changed)}: read only when actor.topk_kl.k > 0; set k or leave them at their defaults"] if changed else []
    if not is_rl(cfg):
        return ["actor.topk_kl.k: the top-k distillation term is part of an RL stage's actor loss; set it to 0 in this stage"]
    problems = []
    if get_path(cfg, "ref.teachers", None):
        problems.append("actor.topk_kl with ref.teachers: the term takes one teacher, the reference (ref.model_path)")
    if reference_crew_devices(cfg):
        problems.append("actor.topk_kl with cluster.device_mapping.ref on devices of its own: the reference crew answers log-probs "
                        "of the sampled tokens only, not top-k lists; place the reference with the actor (the ref list equal to the actor's)")
    for role in ("actor", "ref"):
        sp = get_path(cfg, f"{role}.ulysses_sequence_parallel_size", 1) or 1
        if sp > 1:
            problems.append(f"actor.topk_kl with {role}.ulysses_sequence_parallel_size={sp}: the term reads whole next-token "
                            "distributions, which sequence parallelism splits; set it to 1")
    if get_path(cfg, "model.use_fused_kernels", False):
        problems.append("actor.topk_kl with model.use_fused_kernels: the fused head computes the sampled tokens' log-probs only; "
                        "the term needs the policy's log-probs of the teacher's top-k tokens (set use_fused_kernels false)")
    if get_path(cfg, "algorithm.mix.expert_files", None):
        problems.append("actor.topk_kl with algorithm.mix.expert_files: the expert rows joined to each batch have no teacher top-k")
    if not get_path(cfg, "actor.topk_kl.policy_loss", True):
        unused = {"actor.entropy_coeff": 0.0, "actor.use_kl_loss": False, "actor.sft_loss_coef": 0.0,
                  "actor.topr_positive_loss_coef": 0.0, "actor.topr_negative_loss_coef": 0.0}
        for key, off in unused.items():
            if get_path(cfg, key, off) != off:
                problems.append(f"{key}: actor.topk_kl.policy_loss false makes the top-k term the actor's whole loss, so this term "
                                f"would not be in it; set {key} to {off} or keep policy_loss true")
    return problems
