"""On-policy distillation in the trainer: PG-style token advantages add to the reward's advantage
in the packed batch, and a GKD-style batch adds opd.coef times the divergence over the teacher's
top-k on the tokens a teacher scored (and only those)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from loongsage.algorithms.distill import gkd_divergence, topk_supports
from loongsage.algorithms.losses import masked_aggregate
from loongsage.config.schema import AlgorithmConfig, OpdConfig
from loongsage.sample import Sample
from loongsage.training.batch import check_samples, pack_samples
from loongsage.training.objective import micro_objective
from loongsage.training.token_scores import FullVocabScores

VOCAB = 7


def samples() -> list[Sample]:
    taught = Sample(
        prompt_ids=[1, 2],
        response_ids=[3, 4, 5],
        loss_mask=[1, 0, 1],  # the middle token is tool output: never trained
        advantage=0.5,
        token_advantages=[0.1, -0.2, 0.3],
        teacher_top_ids=[[3, 0], [4, 6], [5, 1]],
        teacher_top_logprobs=[[-0.1, -2.5], [-0.3, -1.5], [-0.2, -1.9]],
    )
    untaught = Sample(prompt_ids=[1, 2, 6], response_ids=[2, 2], advantage=-1.0)  # its source has no teacher
    return [taught, untaught]


def test_token_advantages_add_to_the_rewards_advantage():
    packed = pack_samples(samples())
    (start, end), (start2, end2) = packed.response_spans
    assert packed.advantages[0, start:end].tolist() == pytest.approx([0.6, 0.3, 0.8])
    assert packed.advantages[1, start2:end2].tolist() == [-1.0, -1.0]
    assert packed.teacher_mask[0, start:end].tolist() == [1.0, 1.0, 1.0] and packed.teacher_mask[1].sum() == 0
    assert packed.teacher_top_ids[0, start + 1].tolist() == [4, 6]
    assert pack_samples(samples()[1:]).teacher_top_ids is None  # no teacher in the batch: nothing to carry


def test_gkd_adds_coef_times_the_divergence_on_taught_trained_tokens_only():
    packed = pack_samples(samples())
    logits = torch.randn(2, packed.loss_mask.shape[1], VOCAB, requires_grad=True)
    gkd = AlgorithmConfig(opd=OpdConfig(style="gkd", coef=0.5, divergence="jsd", beta=0.3, top_k=2))
    untaught = dataclasses.replace(packed, teacher_top_ids=None, teacher_top_logprobs=None, teacher_mask=None)
    base = micro_objective(FullVocabScores(logits), untaught, None, None, gkd)
    with_gkd = micro_objective(FullVocabScores(logits), packed, None, None, gkd)

    student, teacher = topk_supports(logits, packed.teacher_top_ids, packed.teacher_top_logprobs)
    divergence = gkd_divergence(student, teacher, "jsd", 0.3)
    # by hand: the mean over the one sample's two trained tokens (the tool-output token and the
    # untaught sample do not count)
    start, _ = packed.response_spans[0]
    expected = (divergence[0, start] + divergence[0, start + 2]) / 2
    assert with_gkd.distill == pytest.approx(expected.item(), rel=1e-5)
    assert with_gkd.distill == pytest.approx(
        masked_aggregate(divergence, packed.loss_mask * packed.teacher_mask, "token_mean").item(), rel=1e-6
    )
    assert with_gkd.loss.item() == pytest.approx(base.loss.item() + 0.5 * expected.item(), rel=1e-5)

    # the divergence's gradient reaches only the teacher's top-k ids of the taught tokens
    (grad,) = torch.autograd.grad(with_gkd.loss - base.loss, logits)
    assert grad[1].abs().max() == 0 and grad[0, start + 1].abs().max() == 0
    touched = grad[0, start].nonzero().flatten().tolist()
    assert touched == [0, 3]


def test_teacher_fields_of_the_wrong_length_are_named():
    bad = samples()
    bad[0].teacher_top_logprobs = bad[0].teacher_top_logprobs[:2]
    with pytest.raises(ValueError, match="sample 0: teacher_top_logprobs has 2 entries but response_ids has 3"):
        check_samples(bad)
    bad = samples()
    bad[0].token_advantages = [0.0]
    with pytest.raises(ValueError, match="sample 0: token_advantages has 1 entries"):
        check_samples(bad)
