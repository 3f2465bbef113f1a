"""Samples -> padded tensors the trainer feeds to the model, and micro-batch splitting.

Alignment: the model sees `prompt_ids + response_ids`; logits at position t predict the
token at t + 1. Per-token tensors start at the first position that predicts a response token
in any row, `first_column` = (shortest prompt) - 1: the prompt part every row has is never
trained, so the trainer computes no logits (the [T, vocab] bulk of the work) for it. Column c
of a per-token tensor is position first_column + c and predicts `targets[:, c]` =
`input_ids[:, first_column + c + 1]`: response token j of a sample with prompt length P sits
in column P + j - 1 - first_column.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from loongsage.algorithms.losses import Aggregation
from loongsage.sample import Sample

PAD_TOKEN_ID = 0
# Sample fields with one entry per response token (each optional: empty when absent).
PER_TOKEN_FIELDS = (
    "loss_mask",
    "response_logprobs",
    "weight_versions",
    "token_advantages",
    "values",
    "returns",
    "teacher_top_ids",
    "teacher_top_logprobs",
)  # any valid id: padded positions are masked out of attention and loss


@dataclass
class PackedBatch:
    input_ids: Tensor  # [B, T] long, right-padded
    attention_mask: Tensor  # [B, T] long
    position_ids: Tensor  # [B, T] long
    first_column: int  # input position of per-token column 0
    loss_mask: Tensor  # [B, C] float (C = T - 1 - first_column), 1 where a response token is trained
    advantages: Tensor  # [B, C] float, each sample's advantage (plus its token_advantages) on its response columns
    rollout_logprobs: Tensor | None  # [B, C] float; None when a sample came without them
    token_versions: Tensor | None  # [B, C] long, weight version of each response token; None when a sample lacks them
    response_spans: list[tuple[int, int]]  # per sample, its response columns [start, end)
    episode_share: Tensor  # [B] float, each sample's Sample.episode_share
    # GKD: the teacher's top-k ids and log-probs [B, C, K] and where a teacher scored [B, C]
    # (a sample without a teacher has 0 there); None when no sample of the batch has them.
    teacher_top_ids: Tensor | None = None
    teacher_top_logprobs: Tensor | None = None
    teacher_mask: Tensor | None = None
    # R3: the engine's experts per position [B, T, layers * top_k] (int32, -1 where a position has
    # none: padding, each row's last token); None when no sample of the batch has them.
    routed_experts: Tensor | None = None
    # The critic's (algorithm.advantage=gae): its values at rollout and the returns [B, C]; None
    # when a sample of the batch lacks them.
    old_values: Tensor | None = None
    returns: Tensor | None = None

    @property
    def targets(self) -> Tensor:
        return self.input_ids[:, self.first_column + 1 :]

    @property
    def logits_to_keep(self) -> int:
        """HF's `logits_to_keep`: the last positions whose logits the columns need, plus the
        final position, which predicts nothing and is dropped."""
        return self.input_ids.shape[1] - self.first_column

    @property
    def num_sequences(self) -> int:
        return self.input_ids.shape[0]

    def aggregation(self, mode: str, norm_length: int | None = None) -> Aggregation:
        """How this micro-batch's per-token values become its loss under `mode` (and, for the
        normed mode, `norm_length`)."""
        return Aggregation(mode, self.episode_share, norm_length)

    def to(self, device) -> PackedBatch:
        """The same batch with its tensors on `device` (a no-op where they already are)."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, Tensor):
                moved[name] = value.to(device)
        return PackedBatch(**moved)

    def response_values(self, per_token: Tensor) -> list[list[float]]:
        """Cut a [B, C] tensor back into one list per sample over its response tokens."""
        return [per_token[i, start:end].tolist() for i, (start, end) in enumerate(self.response_spans)]


def pack_samples(samples: list[Sample], width: int | None = None) -> PackedBatch:
    """`width`: pad to this many positions (default: the longest sample's), e.g. so that every
    micro-batch of a step has the one shape pipeline stages exchange."""
    check_samples(samples)
    longest = max(sample.num_tokens for sample in samples)
    if width is not None and width < longest:
        raise ValueError(f"pack width {width} is shorter than the longest sample ({longest} tokens)")
    width = width or longest
    first_column = min(len(sample.prompt_ids) for sample in samples) - 1
    rows, columns = len(samples), width - 1 - first_column
    input_ids = torch.full((rows, width), PAD_TOKEN_ID, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    loss_mask = torch.zeros((rows, columns))
    advantages = torch.zeros((rows, columns))
    rollout_logprobs = torch.zeros((rows, columns))
    token_versions = torch.zeros((rows, columns), dtype=torch.long)
    spans = []
    for row, sample in enumerate(samples):
        tokens = sample.prompt_ids + sample.response_ids
        input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention_mask[row, : len(tokens)] = 1
        start, end = len(sample.prompt_ids) - 1 - first_column, len(tokens) - 1 - first_column
        spans.append((start, end))
        response_mask = sample.loss_mask or [1] * len(sample.response_ids)
        loss_mask[row, start:end] = torch.tensor(response_mask, dtype=torch.float32)
        advantages[row, start:end] = sample.advantage
        if sample.token_advantages:
            advantages[row, start:end] += torch.tensor(sample.token_advantages, dtype=torch.float32)
        if sample.response_logprobs:
            rollout_logprobs[row, start:end] = torch.tensor(sample.response_logprobs, dtype=torch.float32)
        if sample.weight_versions:
            token_versions[row, start:end] = torch.tensor(sample.weight_versions, dtype=torch.long)
    has_rollout_logprobs = all(sample.response_logprobs for sample in samples)
    has_versions = all(sample.weight_versions for sample in samples)
    return PackedBatch(
        **_teacher_top_k(samples, spans, columns),
        **_critic_targets(samples, spans, columns),
        routed_experts=_routed_experts(samples, width),
        input_ids=input_ids,
        attention_mask=attention_mask,
        # Right padding: positions count from 0 at the first token of every row.
        position_ids=torch.arange(width).expand(rows, width).clone(),
        first_column=first_column,
        loss_mask=loss_mask,
        advantages=advantages,
        rollout_logprobs=rollout_logprobs if has_rollout_logprobs else None,
        token_versions=token_versions if has_versions else None,
        response_spans=spans,
        episode_share=torch.tensor([sample.episode_share for sample in samples], dtype=torch.float32),
    )


def _teacher_top_k(samples: list[Sample], spans: list[tuple[int, int]], columns: int) -> dict[str, Tensor]:
    """The GKD fields of PackedBatch: padded with id 0 and log-prob 0 where no teacher scored,
    which teacher_mask leaves out."""
    scored = [s for s in samples if s.teacher_top_ids]
    if not scored:
        return {}
    k = len(scored[0].teacher_top_ids[0])
    ids = torch.zeros((len(samples), columns, k), dtype=torch.long)
    logprobs = torch.zeros((len(samples), columns, k))
    mask = torch.zeros((len(samples), columns))
    for row, (sample, (start, end)) in enumerate(zip(samples, spans)):
        if sample.teacher_top_ids:
            ids[row, start:end] = torch.tensor(sample.teacher_top_ids, dtype=torch.long)
            logprobs[row, start:end] = torch.tensor(sample.teacher_top_logprobs, dtype=torch.float32)
            mask[row, start:end] = 1.0
    return {"teacher_top_ids": ids, "teacher_top_logprobs": logprobs, "teacher_mask": mask}


def _critic_targets(samples: list[Sample], spans: list[tuple[int, int]], columns: int) -> dict[str, Tensor]:
    """old_values and returns [B, C], where every sample has them."""
    if not all(sample.values and sample.returns for sample in samples):
        return {}
    out = {"old_values": torch.zeros((len(samples), columns)), "returns": torch.zeros((len(samples), columns))}
    for row, (sample, (start, end)) in enumerate(zip(samples, spans)):
        out["old_values"][row, start:end] = torch.tensor(sample.values, dtype=torch.float32)
        out["returns"][row, start:end] = torch.tensor(sample.returns, dtype=torch.float32)
    return out


def _routed_experts(samples: list[Sample], width: int) -> Tensor | None:
    routed = [sample.routed_experts for sample in samples]
    if all(r is None for r in routed):
        return None
    row_width = next(r.shape[1] for r in routed if r is not None)
    out = torch.full((len(samples), width, row_width), -1, dtype=torch.int32)
    for row, routing in enumerate(routed):
        if routing is not None:
            out[row, : len(routing)] = torch.tensor(routing)
    return out


def split_micro_batches(samples: list[Sample], micro_batch_size: int) -> list[list[Sample]]:
    """Consecutive chunks of `micro_batch_size` samples; the last one may be smaller."""
    return [samples[i : i + micro_batch_size] for i in range(0, len(samples), micro_batch_size)]


def split_even(items: list, parts: int, field: str) -> list[list]:
    """`parts` consecutive equal chunks; an uneven split names the config field at fault."""
    if len(items) % parts:
        raise ValueError(f"a batch of {len(items)} samples does not divide into {field}={parts} equal parts")
    size = len(items) // parts
    return [items[i * size : (i + 1) * size] for i in range(parts)]


def check_samples(samples: list[Sample]) -> None:
    """Raise ValueError naming the first sample and field the trainer cannot use."""
    if not samples:
        raise ValueError("cannot train on an empty list of samples")
    for index, sample in enumerate(samples):
        _check_sample(index, sample)


def _check_sample(index: int, sample: Sample) -> None:
    if not sample.prompt_ids:
        raise ValueError(f"sample {index}: prompt_ids is empty; the first response token needs a prompt token before it")
    if not sample.response_ids:
        raise ValueError(f"sample {index}: response_ids is empty")
    for name in PER_TOKEN_FIELDS:
        values = getattr(sample, name)
        if values and len(values) != len(sample.response_ids):
            raise ValueError(f"sample {index}: {name} has {len(values)} entries but response_ids has {len(sample.response_ids)}")
    routed = sample.routed_experts
    if routed is not None and (routed.ndim != 2 or len(routed) != sample.num_tokens - 1):
        raise ValueError(
            f"sample {index}: routed_experts has shape {list(routed.shape)}, expected [{sample.num_tokens - 1}, layers * top_k] "
            f"(every token of prompt_ids + response_ids but the last)"
        )
    if bool(sample.teacher_top_ids) != bool(sample.teacher_top_logprobs) or any(
        len(ids) != len(lps) for ids, lps in zip(sample.teacher_top_ids, sample.teacher_top_logprobs)
    ):
        raise ValueError(f"sample {index}: teacher_top_ids and teacher_top_logprobs must have the same shape")
