"""On-policy distillation: per-token advantages from a teacher's log-probs of the student's samples.

The student samples, a teacher scores every sampled token, and the gap between the two log-probs
is the token's advantage, so a plain policy-gradient loss pulls the student toward the teacher on its
own samples. No reward is read. The teacher's log-probs arrive as `ref_logprobs`: the reference role
is loaded from the teacher's weights (`ref.model_path`), so these estimators declare that they need
the reference. The student's are `old_logprobs`, the actor's log-probs of the batch before the update.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posttrain.algorithms.registry import AdvantageOutput, EstimatorNeeds, register_advantage_estimator


def _inputs(old_logprobs: torch.Tensor | None, ref_logprobs: torch.Tensor | None, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if old_logprobs is None or ref_logprobs is None:
        raise ValueError(f"{name} needs old_logprobs (the student's) and ref_logprobs (the teacher's, ref.model_path)")
    return old_logprobs.detach().float(), ref_logprobs.detach().float()


@register_advantage_estimator("on_policy_distill", needs=EstimatorNeeds(reference=True))
@torch.no_grad()
def on_policy_distill_advantage(
    *,
    response_mask: torch.Tensor,
    old_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 1.0,
    teacher_logprobs: list[torch.Tensor] | None = None,
    teacher_rows: torch.Tensor | None = None,
    teacher_coefs: list[float] | None = None,
    **_: Any,
) -> AdvantageOutput:
    """On-policy distillation: each token's advantage is the teacher's log-prob minus the student's.

    Formula:
        A_t = kl_coef * (log pi_teacher(y_t) - log pi_student(y_t)) * m_t, i.e. minus the sampled
        token's estimate of the reverse KL(student || teacher); returns = advantages.
        With several teachers (ref.teachers: `teacher_logprobs` t_i (B, T), `teacher_rows` r_i (n, B)
        the rows each scores, `teacher_coefs` c_i; ref_logprobs and kl_coef are then not read):
        A_t = sum_i c_i * r_i * (t_i - log pi_student(y_t)) * m_t, 0 for a row no teacher takes, as
        ROLL's compute_advantage sums -opd_kl_coef x KL over the teachers routed to a row.
    Names:
        Trinity-RFT `advantage_fn: on_policy_distill` (`kl_coef`), the estimator of `algorithm_type:
        on_policy_distill` (teacher = `explorer.auxiliary_models[0]`); not in verl or ROLL.
    Paper:
        Agarwal et al. 2024, On-Policy Distillation of Language Models: Learning from Self-Generated
        Mistakes (GKD), arXiv:2306.13649; Gu et al. 2024, MiniLLM, arXiv:2306.08543.
    Reads:
        response_mask, old_logprobs (student), ref_logprobs (teacher), kl_coef (1.0); or
        teacher_logprobs, teacher_rows, teacher_coefs (ref.teachers).
    """
    if teacher_logprobs is not None:
        return _several_teachers(response_mask, old_logprobs, teacher_logprobs, teacher_rows, teacher_coefs)
    student, teacher = _inputs(old_logprobs, ref_logprobs, "on_policy_distill")
    adv = kl_coef * (teacher - student) * response_mask.float()  # (B, T)
    return AdvantageOutput(adv, adv.clone())


def _several_teachers(mask: torch.Tensor, old_logprobs: torch.Tensor | None, teachers: list[torch.Tensor],
                      rows: torch.Tensor | None, coefs: list[float] | None) -> AdvantageOutput:
    """sum_i c_i r_i (t_i - s) m (on_policy_distill's docstring)."""
    if old_logprobs is None or rows is None or coefs is None or not (len(teachers) == len(coefs) == rows.shape[0]):
        raise ValueError("on_policy_distill with several teachers needs old_logprobs and, per teacher, its log-probs, rows and coefficient")
    student = old_logprobs.detach().float()
    adv = torch.zeros_like(student)
    for t, r, c in zip(teachers, rows, coefs):
        adv += c * r.to(student.dtype).unsqueeze(1) * (t.detach().float() - student)  # (B, T); rows it does not take add 0
    adv = adv * mask.float()
    return AdvantageOutput(adv, adv.clone())


def teacher_routes(row_tags: list[str], teacher_tags: list[list[str]], worker_tags: dict[str, list[str]]) -> torch.Tensor:
    """(n_teachers, B) bool: which teachers score each row, as ROLL routes rows (its
    build_domain_to_teacher_names): a row's domain is the reward worker whose tag_included holds the
    row's tag, standing for all that worker's tags, or else the tag alone; a teacher takes the row
    when its tags meet the domain's, and a teacher with no tags takes every row.

    >>> teacher_routes(["gsm8k", "aime", "code"], [["gsm8k"], [], ["code"]], {"math": ["gsm8k", "aime"]}).int().tolist()
    [[1, 1, 0], [1, 1, 1], [0, 0, 1]]
    """
    domain_tags = {}
    for tags in worker_tags.values():
        for tag in tags:
            domain_tags.setdefault(tag, set(tags))
    out = torch.zeros(len(teacher_tags), len(row_tags), dtype=torch.bool)
    for j, tag in enumerate(row_tags):
        tags = domain_tags.get(tag, {tag})
        for i, own in enumerate(teacher_tags):
            out[i, j] = not own or bool(tags & set(own))
    return out


@register_advantage_estimator("jsd", needs=EstimatorNeeds(reference=True))
@torch.no_grad()
def jsd_advantage(
    *,
    response_mask: torch.Tensor,
    old_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 1.0,
    lambda_coef: float = 0.5,
    temperature: float = 1.0,
    **_: Any,
) -> AdvantageOutput:
    """Distillation by a sampled-token Jensen-Shannon divergence between teacher and student.

    Formula:
        s, t = student and teacher log-probs of the sampled token, each divided by `temperature`;
        b = lambda_coef; log m = log(b e^t + (1 - b) e^s) (computed as a logsumexp);
        D = b (t - log m) + (1 - b) (s - log m); b = 0 gives D = s - t, b = 1 gives D = t - s;
        A_t = -kl_coef * D * m_t; returns = advantages.
    Names:
        Trinity-RFT `advantage_fn: jsd` (`kl_coef`, `lambda_coef`, `temperature`), the estimator of
        `algorithm_type: jsd`; not in verl or ROLL.
    Paper:
        Agarwal et al. 2024, On-Policy Distillation of Language Models (GKD's generalised JSD),
        arXiv:2306.13649.
    Deviation:
        like Trinity-RFT, the divergence is estimated from the sampled token's two log-probs, not
        from whole distributions.
    Reads:
        response_mask, old_logprobs (student), ref_logprobs (teacher), kl_coef (1.0),
        lambda_coef (0.5), temperature (1.0).
    """
    if not 0.0 <= lambda_coef <= 1.0:
        raise ValueError(f"jsd lambda_coef must lie in [0, 1], got {lambda_coef}")
    student, teacher = _inputs(old_logprobs, ref_logprobs, "jsd")
    s, t = student / temperature, teacher / temperature
    if lambda_coef == 0.0:
        jsd = s - t
    elif lambda_coef == 1.0:
        jsd = t - s
    else:
        # the mixture's log-prob in log space: exp() of two log-probs would underflow for rare tokens
        log_m = torch.logsumexp(torch.stack([s + math.log1p(-lambda_coef), t + math.log(lambda_coef)]), dim=0)
        jsd = lambda_coef * (t - log_m) + (1.0 - lambda_coef) * (s - log_m)
    adv = -kl_coef * jsd * response_mask.float()  # (B, T)
    return AdvantageOutput(adv, adv.clone())
