"""Offline distillation divergences (posttrain.algorithms.distill) against hand-computed numbers.

The running example: teacher p = (0.25, 0.75) (logits 0, ln 3), student q = (0.5, 0.5) (logits 0, 0).
"""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algorithms.distill import (
    DIVERGENCES, distill_loss, get_divergence, register_divergence, student_logits_at, teacher_targets,
)
from posttrain.config.sections.distill import OBJECTIVES
from posttrain.errors import ConfigError

LN3 = math.log(3.0)
STUDENT = torch.tensor([[0.0, 0.0]])  # (N=1, K=2)
TEACHER = torch.tensor([[0.0, LN3]])


def divergence(name, student=STUDENT, teacher=TEACHER, **kw):
    temps = {k: kw.pop(k) for k in ("topk", "teacher_temperature") if k in kw}
    target = teacher_targets(teacher, temperature=kw.get("temperature", 1.0), **temps)
    return get_divergence(name)(student_logits_at(student, target), target, **kw)


@pytest.mark.parametrize("name, expected", [
    # 0.25 ln(0.25/0.5) + 0.75 ln(0.75/0.5)
    ("forward_kl", 0.25 * math.log(0.5) + 0.75 * math.log(1.5)),
    # 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75)
    ("reverse_kl", 0.5 * math.log(2.0) + 0.5 * math.log(2 / 3)),
    # m = (0.375, 0.625): (KL(p||m) + KL(q||m)) / 2
    ("js_divergence", (0.25 * math.log(0.25 / 0.375) + 0.75 * math.log(0.75 / 0.625)
                       + 0.5 * math.log(0.5 / 0.375) + 0.5 * math.log(0.5 / 0.625)) / 2),
    # m = 0.1 p + 0.9 q = (0.475, 0.525)
    ("skewed_forward_kl", 0.25 * math.log(0.25 / 0.475) + 0.75 * math.log(0.75 / 0.525)),
    # m = 0.9 p + 0.1 q = (0.275, 0.725)
    ("skewed_reverse_kl", 0.5 * math.log(0.5 / 0.275) + 0.5 * math.log(0.5 / 0.725)),
])
def test_each_divergence_matches_the_hand_computed_value(name, expected):
    assert divergence(name, skew_lambda=0.1).item() == pytest.approx(expected, abs=1e-6)


def test_adaptive_kl_weights_forward_and_reverse_kl_by_the_head_and_tail_gaps():
    fkl, rkl = divergence("forward_kl").item(), divergence("reverse_kl").item()
    # alpha 0.5: the tail is p = 0.25 (cumulative 0.25 <= 0.5); both gaps are 0.25 -> equal weights
    assert divergence("adaptive_kl", adaptive_alpha=0.5).item() == pytest.approx(0.5 * fkl + 0.5 * rkl, abs=1e-6)
    # alpha 0.2: no tail, g_tail = 0 -> forward KL alone
    assert divergence("adaptive_kl", adaptive_alpha=0.2).item() == pytest.approx(fkl, abs=1e-6)
    # identical distributions: both gaps 0, the divergence is 0 (ROLL would divide 0 by 0)
    assert divergence("adaptive_kl", student=TEACHER).item() == pytest.approx(0.0, abs=1e-7)


def test_temperatures_divide_the_student_by_one_and_the_teacher_by_both():
    fkl = divergence("forward_kl").item()
    # logits doubled, temperature 2: the same distributions
    assert divergence("forward_kl", student=2 * STUDENT, teacher=2 * TEACHER, temperature=2.0).item() == pytest.approx(fkl, abs=1e-6)
    # the teacher's logits x4 with temperature 2 and teacher_temperature 2: p unchanged
    assert divergence("forward_kl", teacher=4 * TEACHER, temperature=1.0, teacher_temperature=4.0).item() == pytest.approx(fkl, abs=1e-6)
    assert divergence("forward_kl", teacher=4 * TEACHER).item() != pytest.approx(fkl, abs=1e-3)


def test_topk_renormalises_both_distributions_over_the_teachers_k_tokens():
    teacher = torch.tensor([[LN3, 0.0, -1.0]])  # top-2: ids 0 and 1, p = (0.75, 0.25) after renormalising
    student = torch.tensor([[0.0, 0.0, 5.0]])  # its mass on id 2 is left out: q = (0.5, 0.5) over the two
    fkl = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    target = teacher_targets(teacher, topk=2)
    assert target.indices.tolist() == [[0, 1]]
    assert divergence("forward_kl", student=student, teacher=teacher, topk=2).item() == pytest.approx(fkl, abs=1e-6)
    assert divergence("forward_kl", student=student, teacher=teacher, topk=0).item() > fkl + 0.5  # the whole vocabulary


def test_classes_the_teacher_rules_out_are_left_out_of_every_sum():
    teacher = torch.tensor([[0.0, LN3, -math.inf]])
    student = torch.zeros(1, 3)  # q = 1/3 each
    # reverse KL over the first two classes only: 1/3 ln((1/3)/0.25) + 1/3 ln((1/3)/0.75)
    expected = (math.log(4 / 3) + math.log(4 / 9)) / 3
    for name in OBJECTIVES:
        assert torch.isfinite(divergence(name, student=student, teacher=teacher, topk=0)).all(), name
    assert divergence("reverse_kl", student=student, teacher=teacher, topk=0).item() == pytest.approx(expected, abs=1e-6)


def test_forward_kl_gradient_is_q_minus_p():
    student = STUDENT.clone().requires_grad_(True)
    divergence("forward_kl", student=student).sum().backward()
    assert student.grad.tolist()[0] == pytest.approx([0.25, -0.25], abs=1e-6)


def test_the_loss_mixes_nll_and_divergence_token_means_by_weight():
    # (1 - 0.25) x 2 / 4 + 0.25 x 4 / 4
    assert distill_loss(torch.tensor(2.0), torch.tensor(4.0), 4.0, 0.25).item() == pytest.approx(0.625)


def test_the_registry_holds_every_config_choice_and_names_them_for_a_typo():
    assert sorted(DIVERGENCES) == sorted(OBJECTIVES)
    with pytest.raises(ConfigError, match="did you mean 'forward_kl'"):
        get_divergence("forward_k")
    with pytest.raises(ValueError, match="already registered"):
        register_divergence("forward_kl")(lambda *a, **k: None)
