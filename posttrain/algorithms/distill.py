"""Offline knowledge distillation: divergences between a teacher's and a student's next-token
distributions at the same positions of fixed (SFT-style) sequences.

Tokens are flattened: N trained positions, each with a distribution over K classes: the whole
vocabulary (K = V) or the teacher's top-k tokens (K = k, both distributions renormalised over those
k tokens, as ROLL's distillation pipeline does). Every divergence takes the student's raw logits at
those classes and the teacher's `TeacherTargets` and returns one value per position, (N,); the
stage masks and averages them (`posttrain.trainer.distill`).

Temperatures (ROLL's `kd_temperature` and `teacher_temperature`): the student's logits are divided
by `temperature`, the teacher's by `temperature * teacher_temperature`. No T^2 factor is applied to
the loss (Hinton et al. scale soft-target gradients by T^2; ROLL does not, nor does posttrain).

Registered by name in DIVERGENCES (`algorithm.distill.objective`), with ROLL's names.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from posttrain.errors import ConfigError


@dataclass(frozen=True)
class TeacherTargets:
    """The teacher's distribution at N positions over K classes (no gradient)."""

    probs: Tensor  # (N, K) fp32, sums to 1 over the classes that are not -inf
    logprobs: Tensor  # (N, K) fp32
    indices: Tensor | None  # (N, K) vocabulary ids of the classes (top-k), None for the whole vocabulary
    inf_mask: Tensor  # (N, K) bool, classes whose teacher logit is -inf (left out of every sum)


def teacher_targets(teacher_logits: Tensor, *, topk: int = 0, temperature: float = 1.0, teacher_temperature: float = 1.0) -> TeacherTargets:
    """The teacher's (top-k) distribution from its logits (N, V).

    Formula:
        z = logits / (temperature * teacher_temperature); with topk > 0 keep the k largest z
        (renormalised: p_j = softmax over those k); else all V. inf_mask marks z = -inf.
    Names:
        ROLL `logits_topk` (0: whole vocabulary), `kd_temperature`, `teacher_temperature`
        (its strategies' op_compute_topk_probs_and_indices).
    """
    if temperature <= 0 or teacher_temperature <= 0:
        raise ValueError(f"temperatures must be > 0, got {temperature} and {teacher_temperature}")
    scaled = teacher_logits.detach().float() / (temperature * teacher_temperature)  # (N, V)
    indices = None
    if topk > 0:
        scaled, indices = torch.topk(scaled, k=min(topk, scaled.shape[-1]), dim=-1)  # (N, K)
    return TeacherTargets(torch.softmax(scaled, -1), torch.log_softmax(scaled, -1), indices, scaled.isinf())


def student_logits_at(student_logits: Tensor, targets: TeacherTargets) -> Tensor:
    """The student's logits (N, V) at the teacher's classes: (N, K)."""
    return student_logits if targets.indices is None else student_logits.gather(-1, targets.indices)


Divergence = Callable[..., Tensor]
DIVERGENCES: dict[str, Divergence] = {}


def register_divergence(name: str) -> Callable[[Divergence], Divergence]:
    def add(fn: Divergence) -> Divergence:
        if name in DIVERGENCES:
            raise ValueError(f"divergence {name!r} is already registered")
        DIVERGENCES[name] = fn
        return fn
    return add


def get_divergence(name: str) -> Divergence:
    if name not in DIVERGENCES:
        close = difflib.get_close_matches(name, DIVERGENCES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"algorithm.distill.objective {name!r} is not a divergence{hint}; choose one of {sorted(DIVERGENCES)}")
    return DIVERGENCES[name]


def _kl(p: Tensor, log_p: Tensor, log_q: Tensor, inf_mask: Tensor) -> Tensor:
    """sum_j p_j (log p_j - log q_j) over the classes outside inf_mask; a zero p_j adds 0."""
    terms = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p))  # (N, K)
    return terms.masked_fill(inf_mask, 0.0).sum(-1)  # (N,)


def _student(student_logits: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    log_q = torch.log_softmax(student_logits.float() / temperature, -1)  # (N, K)
    return log_q.exp(), log_q


@register_divergence("forward_kl")
def forward_kl(student_logits: Tensor, teacher: TeacherTargets, *, temperature: float = 1.0, **_: float) -> Tensor:
    """Forward KL, the teacher's distribution p against the student's q.

    Formula:
        D = sum_j p_j (log p_j - log q_j), q = softmax(student_logits / temperature) over the K classes.
    Names:
        ROLL `kd_objective: forward_kl` (its default).
    Paper:
        Hinton, Vinyals and Dean 2015, Distilling the Knowledge in a Neural Network, arXiv:1503.02531.
    """
    _, log_q = _student(student_logits, temperature)
    return _kl(teacher.probs, teacher.logprobs, log_q, teacher.inf_mask)


@register_divergence("reverse_kl")
def reverse_kl(student_logits: Tensor, teacher: TeacherTargets, *, temperature: float = 1.0, **_: float) -> Tensor:
    """Reverse KL, the student's q against the teacher's p (mode seeking).

    Formula:
        D = sum_j q_j (log q_j - log p_j).
    Names:
        ROLL `kd_objective: reverse_kl`.
    Paper:
        Gu et al. 2024, MiniLLM: Knowledge Distillation of Large Language Models, arXiv:2306.08543.
    """
    q, log_q = _student(student_logits, temperature)
    return _kl(q, log_q, teacher.logprobs, teacher.inf_mask)


@register_divergence("adaptive_kl")
def adaptive_kl(student_logits: Tensor, teacher: TeacherTargets, *, temperature: float = 1.0, adaptive_alpha: float = 0.5, **_: float) -> Tensor:
    """Adaptive KL: forward and reverse KL weighted by where the two distributions differ.

    Formula:
        sort the classes by p ascending; the tail is the classes whose cumulative p (from the
        smallest) is <= alpha, the head the rest; g_head = sum_head |p_j - q_j|, g_tail likewise
        (no gradient); D = g_head / (g_head + g_tail) * FKL + g_tail / (g_head + g_tail) * RKL.
        Deviation: where p = q exactly (g_head + g_tail = 0) both weights are 0.5 (ROLL divides by 0).
    Names:
        ROLL `kd_objective: adaptive_kl`, `adaptive_kl_alpha`.
    Paper:
        Wu et al. 2024, Rethinking Kullback-Leibler Divergence in Knowledge Distillation for Large
        Language Models, arXiv:2404.02657.
    """
    q, _ = _student(student_logits, temperature)
    sorted_p, order = teacher.probs.sort(-1)  # (N, K) ascending
    gap = (sorted_p - q.gather(-1, order)).abs().detach()  # (N, K)
    tail = (torch.cumsum(sorted_p, -1) <= adaptive_alpha).float()  # (N, K)
    g_head, g_tail = (gap * (1 - tail)).sum(-1), (gap * tail).sum(-1)  # (N,)
    total = g_head + g_tail
    w_head = torch.where(total > 0, g_head / total.clamp_min(1e-30), torch.full_like(total, 0.5))  # (N,)
    fkl = forward_kl(student_logits, teacher, temperature=temperature)
    rkl = reverse_kl(student_logits, teacher, temperature=temperature)
    return w_head * fkl + (1 - w_head) * rkl


@register_divergence("skewed_forward_kl")
def skewed_forward_kl(student_logits: Tensor, teacher: TeacherTargets, *, temperature: float = 1.0, skew_lambda: float = 0.1, **_: float) -> Tensor:
    """Skew forward KL: the teacher against a mixture that leans toward it.

    Formula:
        m = lambda p + (1 - lambda) q; D = sum_j p_j (log p_j - log m_j).
    Names:
        ROLL `kd_objective: skewed_forward_kl`, `skew_lambda`.
    Paper:
        Ko et al. 2024, DistiLLM: Towards Streamlined Distillation for Large Language Models, arXiv:2402.03898.
    """
    q, _ = _student(student_logits, temperature)
    log_m = torch.log(skew_lambda * teacher.probs + (1 - skew_lambda) * q)  # (N, K)
    return _kl(teacher.probs, teacher.logprobs, log_m, teacher.inf_mask)


@register_divergence("skewed_reverse_kl")
def skewed_reverse_kl(student_logits: Tensor, teacher: TeacherTargets, *, temperature: float = 1.0, skew_lambda: float = 0.1, **_: float) -> Tensor:
    """Skew reverse KL: the student against a mixture that leans toward it.

    Formula:
        m = (1 - lambda) p + lambda q; D = sum_j q_j (log q_j - log m_j).
    Names:
        ROLL `kd_objective: skewed_reverse_kl`, `skew_lambda`.
    Paper:
        Ko et al. 2024, DistiLLM, arXiv:2402.03898.
    """
    q, log_q = _student(student_logits, temperature)
    log_m = torch.log((1 - skew_lambda) * teacher.probs + skew_lambda * q)  # (N, K)
    return _kl(q, log_q, log_m, teacher.inf_mask)


@register_divergence("js_divergence")
def js_divergence(student_logits: Tensor, teacher: TeacherTargets, *, temperature: float = 1.0, **_: float) -> Tensor:
    """Jensen-Shannon divergence (the generalised JSD of GKD at beta = 0.5).

    Formula:
        m = (p + q) / 2; D = (KL(p || m) + KL(q || m)) / 2.
        Deviation: ROLL adds 1e-9 inside each log; posttrain leaves zero-probability terms out instead.
    Names:
        ROLL `kd_objective: js_divergence`.
    Paper:
        Agarwal et al. 2024, On-Policy Distillation of Language Models: Learning from Self-Generated
        Mistakes (GKD), arXiv:2306.13649.
    """
    q, log_q = _student(student_logits, temperature)
    log_m = torch.log((teacher.probs + q) / 2)  # (N, K)
    return (_kl(teacher.probs, teacher.logprobs, log_m, teacher.inf_mask) + _kl(q, log_q, log_m, teacher.inf_mask)) / 2


def distill_loss(nll_sum: Tensor, divergence_sum: Tensor, tokens: float, weight: float) -> Tensor:
    """The stage's loss: the SFT and divergence sums over the trained tokens, mixed.

    Formula:
        L = (1 - w) * sum_t -log q(y_t) / N + w * sum_t D_t / N, N = trained tokens of the batch.
    Names:
        ROLL `distill_loss_weight` (w; its default 0.5).
    """
    return ((1 - weight) * nll_sum + weight * divergence_sum) / tokens
