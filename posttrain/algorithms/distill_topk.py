"""On-policy distillation by a supervised top-k forward KL (`actor.topk_kl`).

The student samples responses; at every response token the teacher's k most likely next tokens
and their log-probabilities (its full softmax, not renormalised over the k) are compared with the
student's log-probabilities of the same tokens:

    l_t = max(0, sum_{i in top-k_T(t)} p_T(i) (log p_T(i) - log q(i)))

with p_T the teacher's distribution at its temperature and q the student's softmax(logits / rollout
temperature), the distribution it samples from. This is the forward KL(p_T || q) restricted to the
teacher's top-k tokens (generalised knowledge distillation, Agarwal et al. 2024, arXiv:2306.13649,
on the student's own samples). Restricted to k tokens neither distribution sums to 1, so the sum can
be negative; it is floored at 0. With `log_prob_min_clamp` c both log-probabilities are first raised
to at least c (p_T is then exp of the raised value): a token the student gives almost no mass cannot
make the loss blow up, and has no gradient. `loss_max_clamp` M then caps each token's value at M.

The loss is the gradient of this per-token value aggregated like the policy loss (`loss_agg_mode`),
a supervised term of the current policy: no importance ratio, no advantage.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class TopkKL:
    """The per-token top-k forward KL and how much mass each side puts on the teacher's top-k."""

    values: Tensor  # (B, T) l_t, floored at 0 and capped at loss_max_clamp
    student_mass: Tensor  # (B, T) sum of q over the teacher's top-k (before any clamp)
    teacher_mass: Tensor  # (B, T) sum of p_T over its top-k (before any clamp)


def topk_forward_kl(
    student_logprobs: Tensor, teacher_logprobs: Tensor, *, log_prob_min_clamp: float | None = None,
    loss_max_clamp: float | None = None,
) -> TopkKL:
    """l_t of the module docstring from the student's and the teacher's log-probs of the teacher's
    top-k tokens, both (B, T, K) (the student's with gradient); computed in fp32."""
    student = student_logprobs.float()
    teacher = teacher_logprobs.float()
    student_mass = student.detach().exp().sum(-1)  # (B, T)
    teacher_mass = teacher.exp().sum(-1)  # (B, T)
    if log_prob_min_clamp is not None:
        student = student.clamp_min(log_prob_min_clamp)
        teacher = teacher.clamp_min(log_prob_min_clamp)
    values = (teacher.exp() * (teacher - student)).sum(-1).clamp_min(0.0)  # (B, T)
    if loss_max_clamp is not None:
        values = values.clamp(-loss_max_clamp, loss_max_clamp)
    return TopkKL(values, student_mass, teacher_mass)
