"""The top-k forward KL of on-policy distillation (posttrain.algorithms.distill_topk), against the
formula written out token by token."""

from __future__ import annotations

import math

import torch

from posttrain.algorithms import topk_forward_kl


def _by_hand(student: list[float], teacher: list[float], floor: float | None = None, cap: float | None = None) -> float:
    """sum_i p_T(i) (log p_T(i) - log q(i)) over the k tokens, with the floor on both log-probs, then max(0, .) and the cap."""
    if floor is not None:
        student = [max(s, floor) for s in student]
        teacher = [max(t, floor) for t in teacher]
    value = max(0.0, sum(math.exp(t) * (t - s) for s, t in zip(student, teacher)))
    return value if cap is None else min(value, cap)


S = [[[-0.5, -1.5, -3.0], [-2.0, -0.2, -25.0]]]  # (1, 2, 3) the student's log-probs of the teacher's top-3
T = [[[-0.3, -2.0, -2.5], [-0.1, -3.0, -4.0]]]  # the teacher's own


def test_values_and_masses_follow_the_formula():
    out = topk_forward_kl(torch.tensor(S), torch.tensor(T))
    for t in range(2):
        assert math.isclose(float(out.values[0, t]), _by_hand(S[0][t], T[0][t]), rel_tol=1e-6)
        assert math.isclose(float(out.student_mass[0, t]), sum(math.exp(s) for s in S[0][t]), rel_tol=1e-6)
        assert math.isclose(float(out.teacher_mass[0, t]), sum(math.exp(x) for x in T[0][t]), rel_tol=1e-6)
    assert float(out.values[0, 1]) > 1.5


def test_floor_and_cap():
    out = topk_forward_kl(torch.tensor(S), torch.tensor(T), log_prob_min_clamp=-10.0, loss_max_clamp=1.0)
    assert math.isclose(float(out.values[0, 0]), _by_hand(S[0][0], T[0][0], -10.0, 1.0), rel_tol=1e-6)
    assert float(out.values[0, 1]) == 1.0 and _by_hand(S[0][1], T[0][1], -10.0) > 1.0  # capped
    assert _by_hand(S[0][1], T[0][1], -10.0) < _by_hand(S[0][1], T[0][1])  # the floor lifted the student's -25
    masses = topk_forward_kl(torch.tensor(S), torch.tensor(T)).student_mass
    torch.testing.assert_close(out.student_mass, masses)  # the masses are of the unclamped log-probs


def test_a_sum_below_zero_is_floored_and_a_floored_token_has_no_gradient():
    student = torch.tensor([[[-0.1, -0.2]]], requires_grad=True)  # more mass than the teacher on both: the sum is negative
    out = topk_forward_kl(student, torch.tensor([[[-1.0, -2.0]]]))
    assert float(out.values.detach()) == 0.0
    student = torch.tensor([[[-0.5, -30.0]]], requires_grad=True)
    topk_forward_kl(student, torch.tensor([[[-0.4, -1.5]]]), log_prob_min_clamp=-10.0).values.sum().backward()
    assert student.grad[0, 0, 1] == 0.0 and student.grad[0, 0, 0] == -math.exp(-0.4)  # d/ds of -p_T s
