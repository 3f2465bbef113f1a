"""On-policy distillation: the student samples, a teacher scores the student's tokens, and the
student moves toward the teacher (docs: ANCHORS.md, On-policy distillation).

Two styles, both per response token, both pure tensor code:

- **PG style.** The per-token reverse KL on the tokens the student sampled,
  k1_t = log p_student(y_t) - log p_teacher(y_t), enters the policy gradient as an advantage:
  A_t = -coef * k1_t (no discount), added to the task reward's advantage. Only the teacher's
  log-probability of each sampled token is needed. A token the teacher likes more than the
  student (k1 < 0) is pushed up.
- **GKD style.** A divergence between the student's and the teacher's next-token distributions
  at every response position, minimised directly: over the teacher's top-k token ids (both
  distributions renormalised on those k ids) or over the full vocabulary. forward_kl is
  KL(teacher || student) (mode covering), reverse_kl is KL(student || teacher) (mode seeking),
  jsd is the generalised Jensen-Shannon divergence of GKD (Agarwal et al., 2024):
  JSD(beta) = beta KL(P_t || M) + (1 - beta) KL(P_s || M), M = beta P_t + (1 - beta) P_s, which
  is 0 for identical distributions and bounded by log 2 at beta = 0.5.

Shapes: [B, T] per token; distributions [B, T, K] as log-probabilities over one support.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

GKD_DIVERGENCES = ("forward_kl", "reverse_kl", "jsd")


def opd_advantages(student_logprobs: Tensor, teacher_logprobs: Tensor, mask: Tensor, coef: float) -> Tensor:
    """PG-style distillation advantage per token: -coef * (log p_s - log p_t), 0 where `mask` is 0.
    Detached: the teacher's signal is a reward, not a path for gradients."""
    _same_shape(student_logprobs, teacher_logprobs, mask)
    k1 = (student_logprobs - teacher_logprobs).detach()
    return torch.where(mask.bool(), -coef * k1, torch.zeros_like(k1))


def reverse_kl_estimate(student_logprobs: Tensor, teacher_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Mean over masked tokens of k1 = log p_s - log p_t on the student's own samples: an unbiased
    estimate of KL(student || teacher) per token, the number `teacher/reverse_kl/<name>` reports."""
    _same_shape(student_logprobs, teacher_logprobs, mask)
    keep = mask.bool()
    if not keep.any():
        return student_logprobs.new_zeros(())
    return (student_logprobs - teacher_logprobs)[keep].float().mean()


def gkd_divergence(student_logp: Tensor, teacher_logp: Tensor, kind: str, beta: float = 0.5) -> Tensor:
    """Per position divergence [...] between two distributions given as log-probabilities over the
    same support [..., K] (each summing to 1 over K). Gradients flow into the student only."""
    if kind not in GKD_DIVERGENCES:
        raise ValueError(f"unknown divergence {kind!r}; expected one of {', '.join(GKD_DIVERGENCES)}")
    if student_logp.shape != teacher_logp.shape:
        raise ValueError(f"student {tuple(student_logp.shape)} and teacher {tuple(teacher_logp.shape)} supports differ")
    student_logp, teacher_logp = _at_least_fp32(student_logp), _at_least_fp32(teacher_logp.detach())
    if kind == "forward_kl":
        return _kl(teacher_logp, student_logp)
    if kind == "reverse_kl":
        return _kl(student_logp, teacher_logp)
    if not 0.0 < beta < 1.0:
        raise ValueError(f"jsd beta must be in (0, 1), got {beta}")
    # log M = log(beta P_t + (1 - beta) P_s), computed in log space.
    mixture = torch.logsumexp(torch.stack([teacher_logp + math.log(beta), student_logp + math.log(1 - beta)]), dim=0)
    return beta * _kl(teacher_logp, mixture) + (1 - beta) * _kl(student_logp, mixture)


def topk_supports(student_logits: Tensor, teacher_ids: Tensor, teacher_logprobs: Tensor) -> tuple[Tensor, Tensor]:
    """Both distributions on the teacher's top-k ids, renormalised there: (student [..., K],
    teacher [..., K]) log-probabilities. `student_logits` [..., V]; `teacher_ids`,
    `teacher_logprobs` [..., K] (the teacher's log-probabilities over its whole vocabulary)."""
    if teacher_ids.shape != teacher_logprobs.shape or teacher_ids.shape[:-1] != student_logits.shape[:-1]:
        raise ValueError(
            f"teacher ids {tuple(teacher_ids.shape)} and logprobs {tuple(teacher_logprobs.shape)} must be "
            f"[..., K] over the student's positions {tuple(student_logits.shape[:-1])}"
        )
    picked = _at_least_fp32(student_logits).gather(-1, teacher_ids.long())
    return picked.log_softmax(dim=-1), _at_least_fp32(teacher_logprobs).log_softmax(dim=-1)


def _at_least_fp32(x: Tensor) -> Tensor:
    """bf16 / fp16 logits lose the small differences a divergence is made of."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _kl(p_log: Tensor, q_log: Tensor) -> Tensor:
    """KL(P || Q) over the last dimension; a zero-probability entry of P adds nothing."""
    p = p_log.exp()
    return torch.where(p > 0, p * (p_log - q_log), torch.zeros_like(p)).sum(dim=-1)


def _same_shape(*tensors: Tensor) -> None:
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"per-token tensors must share one [B, T] shape, got {sorted(shapes)}")
