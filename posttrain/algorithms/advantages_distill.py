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
    **_: Any,
) -> AdvantageOutput:
    """On-policy distillation: each token's advantage is the teacher's log-prob minus the student's.

    Formula:
        A_t = kl_coef * (log pi_teacher(y_t) - log pi_student(y_t)) * m_t, i.e. minus the sampled
        token's estimate of the reverse KL(student || teacher); returns = advantages.
    Names:
        Trinity-RFT `advantage_fn: on_policy_distill` (`kl_coef`), the estimator of `algorithm_type:
        on_policy_distill` (teacher = `explorer.auxiliary_models[0]`); not in verl or ROLL.
    Paper:
        Agarwal et al. 2024, On-Policy Distillation of Language Models: Learning from Self-Generated
        Mistakes (GKD), arXiv:2306.13649; Gu et al. 2024, MiniLLM, arXiv:2306.08543.
    Reads:
        response_mask, old_logprobs (student), ref_logprobs (teacher), kl_coef (1.0).
    """
    student, teacher = _inputs(old_logprobs, ref_logprobs, "on_policy_distill")
    adv = kl_coef * (teacher - student) * response_mask.float()  # (B, T)
    return AdvantageOutput(adv, adv.clone())


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
