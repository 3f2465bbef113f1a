"""Distillation losses against values computed by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from loongsage.algorithms.distill import gkd_divergence, opd_advantages, reverse_kl_estimate, topk_supports


def logs(*probs: float) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64).log()


def test_pg_style_advantage_is_minus_coef_times_k1_on_trained_tokens_only():
    student = torch.tensor([[-1.0, -2.0, -0.5]])
    teacher = torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[1, 1, 0]])
    # k1 = [0.5, -1.0, 0.0]; A = -0.5 * k1 = [-0.25, 0.5], and 0 where the mask is 0.
    assert opd_advantages(student, teacher, mask, coef=0.5).tolist() == [[-0.25, 0.5, 0.0]]
    # The estimate of KL(student || teacher): mean k1 over masked tokens = (0.5 - 1.0) / 2.
    assert reverse_kl_estimate(student, teacher, mask).item() == pytest.approx(-0.25)
    assert reverse_kl_estimate(student, teacher, torch.zeros_like(mask)).item() == 0.0


def test_the_advantage_carries_no_gradient_into_either_model():
    student = torch.tensor([[-1.0]], requires_grad=True)
    teacher = torch.tensor([[-2.0]], requires_grad=True)
    assert not opd_advantages(student, teacher, torch.ones(1, 1), 1.0).requires_grad


def test_per_token_tensors_of_different_shapes_are_refused():
    with pytest.raises(ValueError, match=r"share one \[B, T\] shape"):
        opd_advantages(torch.zeros(1, 3), torch.zeros(1, 2), torch.ones(1, 3), 1.0)


# P_t = [0.5, 0.5], P_s = [0.25, 0.75]:
#   KL(t || s) = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75)                = 0.1438410362
#   KL(s || t) = 0.25 ln(0.25/0.5) + 0.75 ln(0.75/0.5)              = 0.1308120359
#   M = [0.375, 0.625]; KL(t || M) = 0.0322692606, KL(s || M) = 0.0353748906
#   JSD(0.5) = 0.5 * (0.0322692606 + 0.0353748906)                  = 0.0338220756
@pytest.mark.parametrize("kind, expected", [("forward_kl", 0.1438410362), ("reverse_kl", 0.1308120359), ("jsd", 0.0338220756)])
def test_divergences_match_the_hand_computed_values(kind, expected):
    value = gkd_divergence(logs(0.25, 0.75), logs(0.5, 0.5), kind)
    assert value.item() == pytest.approx(expected, abs=1e-9)


def test_jsd_is_zero_for_equal_distributions_and_log2_for_disjoint_ones():
    same = logs(0.2, 0.3, 0.5)
    assert gkd_divergence(same, same, "jsd").item() == pytest.approx(0.0, abs=1e-12)
    assert gkd_divergence(logs(1.0, 0.0), logs(0.0, 1.0), "jsd").item() == pytest.approx(math.log(2))
    # beta weighs the teacher: at beta = 0.9 the mixture is mostly the teacher's.
    assert gkd_divergence(logs(0.25, 0.75), logs(0.5, 0.5), "jsd", beta=0.9).item() != pytest.approx(0.0338220756)


def test_a_zero_probability_entry_adds_nothing_instead_of_nan():
    value = gkd_divergence(logs(0.5, 0.5, 0.0), logs(0.25, 0.25, 0.5), "reverse_kl")
    assert value.item() == pytest.approx(math.log(2))  # 0.5 ln 2 + 0.5 ln 2 + 0


def test_forward_kl_gradient_on_full_vocabulary_logits_is_softmax_minus_teacher():
    logits = torch.tensor([[0.3, -1.2, 2.0, 0.0]], dtype=torch.float64, requires_grad=True)
    teacher = logs(0.1, 0.2, 0.3, 0.4).unsqueeze(0)
    gkd_divergence(logits.log_softmax(-1), teacher, "forward_kl").sum().backward()
    expected = logits.detach().softmax(-1) - teacher.exp()
    assert torch.allclose(logits.grad.double(), expected, atol=1e-6)


def test_the_teacher_gets_no_gradient():
    teacher = logs(0.5, 0.5).requires_grad_()
    student = logs(0.25, 0.75).requires_grad_()
    gkd_divergence(student, teacher, "jsd").backward()
    assert teacher.grad is None and student.grad is not None


def test_top_k_renormalises_both_distributions_on_the_teachers_ids():
    # Student logits give ids 1 and 2 weights 2 and 3 (e^ln2, e^ln3): 0.4 / 0.6 on {1, 2}.
    student_logits = torch.tensor([[0.0, math.log(2), math.log(3), 5.0]])
    ids = torch.tensor([[1, 2]])
    teacher = torch.tensor([[math.log(0.2), math.log(0.3)]])  # 0.2 / 0.3 of its vocabulary: 0.4 / 0.6
    student_k, teacher_k = topk_supports(student_logits, ids, teacher)
    assert student_k.exp().tolist()[0] == pytest.approx([0.4, 0.6])
    assert teacher_k.exp().tolist()[0] == pytest.approx([0.4, 0.6])
    assert gkd_divergence(student_k, teacher_k, "forward_kl").item() == pytest.approx(0.0, abs=1e-6)


def test_unknown_divergences_and_mismatched_supports_are_named():
    with pytest.raises(ValueError, match="unknown divergence 'tvd'; expected one of forward_kl, reverse_kl, jsd"):
        gkd_divergence(logs(0.5, 0.5), logs(0.5, 0.5), "tvd")
    with pytest.raises(ValueError, match="supports differ"):
        gkd_divergence(logs(0.5, 0.5), logs(0.2, 0.3, 0.5), "jsd")
    with pytest.raises(ValueError, match=r"jsd beta must be in \(0, 1\)"):
        gkd_divergence(logs(0.5, 0.5), logs(0.5, 0.5), "jsd", beta=1.0)
    with pytest.raises(ValueError, match=r"must be \[\.\.\., K\]"):
        topk_supports(torch.zeros(2, 4), torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2))
