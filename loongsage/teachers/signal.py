"""What a teacher's scores add to the student's samples (algorithm.opd), and the per-teacher
reverse KL the run reports.

PG style: each token's advantage gains -coef * (log p_student - log p_teacher) of the token the
student sampled (`Sample.token_advantages`), the student's log-probs being the ones it sampled
with. GKD style: the teacher's top-k ids and log-probs ride along to the trainer
(`Sample.teacher_top_ids`, `teacher_top_logprobs`), whose objective adds the divergence.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from loongsage.algorithms.distill import opd_advantages
from loongsage.config.schema import OpdConfig
from loongsage.sample import Sample
from loongsage.teachers.scoring import TeacherScores


def apply_scores(samples: Sequence[Sample], scores: Sequence[TeacherScores], opd: OpdConfig) -> dict[str, float]:
    """Give each sample its teacher's signal; returns `teacher/reverse_kl/<name>`: per teacher the
    mean of log p_student - log p_teacher over its samples' trained tokens (an estimate of
    KL(student || teacher) per token)."""
    k1_sum: dict[str, float] = {}
    tokens: dict[str, int] = {}
    for index, (sample, score) in enumerate(zip(samples, scores, strict=True)):
        if len(sample.response_logprobs) != len(sample.response_ids):
            raise ValueError(f"sample {index} has no rollout logprobs: the teacher's signal needs the student's own")
        student = torch.tensor(sample.response_logprobs, dtype=torch.float64)
        teacher = torch.tensor(score.logprobs, dtype=torch.float64)
        mask = torch.tensor(sample.loss_mask or [1] * len(sample.response_ids), dtype=torch.float64)
        keep = mask.bool()
        k1_sum[score.teacher] = k1_sum.get(score.teacher, 0.0) + float((student - teacher)[keep].sum())
        tokens[score.teacher] = tokens.get(score.teacher, 0) + int(keep.sum())
        if opd.style == "pg":
            sample.token_advantages = opd_advantages(student, teacher, mask, opd.coef).tolist()
        else:
            sample.teacher_top_ids, sample.teacher_top_logprobs = score.top_ids, score.top_logprobs
    return {f"teacher/reverse_kl/{name}": k1_sum[name] / tokens[name] for name in k1_sum if tokens[name]}
