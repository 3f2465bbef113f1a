"""Per-token log-probs and entropy (and, for distillation, the logits at chosen ids) from a
model's output, however its vocabulary is laid out.

The objective (loongsage.training.objective) only asks these questions, so one objective
serves every backend: HF models hand over full-vocabulary logits; Megatron under tensor
parallelism hands over each rank's vocabulary shard, which is never gathered.
"""

from __future__ import annotations

from typing import Protocol

import torch.distributed as dist
from torch import Tensor

from loongsage.algorithms.losses import entropy_from_logits, token_logprobs
from loongsage.algorithms.vocab_parallel import (
    vocab_parallel_entropy,
    vocab_parallel_logits_at,
    vocab_parallel_token_logprobs,
)


class TokenScores(Protocol):
    def logprobs(self, targets: Tensor) -> Tensor:
        """[B, C] fp32 log p(targets), differentiable."""

    def entropy(self) -> Tensor:
        """[B, C] fp32 entropy of each position's distribution, differentiable."""

    def logits_at(self, ids: Tensor) -> Tensor:
        """[B, C, K] fp32 logits at token ids [B, C, K] (a teacher's top-k), differentiable."""


class FullVocabScores:
    """Logits [B, C, V] over the whole vocabulary."""

    def __init__(self, logits: Tensor):
        self.logits = logits

    def logprobs(self, targets: Tensor) -> Tensor:
        return token_logprobs(self.logits, targets)

    def entropy(self) -> Tensor:
        return entropy_from_logits(self.logits)

    def logits_at(self, ids: Tensor) -> Tensor:
        return vocab_parallel_logits_at(self.logits, ids, 0, None)


class VocabShardScores:
    """Logits [B, C, V_local]: this tensor-parallel rank's columns [vocab_start, vocab_start +
    V_local) of the vocabulary. Max and sum-exp are reduced over `group`; no rank ever holds
    [tokens x full vocabulary]."""

    def __init__(self, logits_shard: Tensor, vocab_start: int, group: dist.ProcessGroup | None):
        self.logits_shard, self.vocab_start, self.group = logits_shard, vocab_start, group

    def logprobs(self, targets: Tensor) -> Tensor:
        return vocab_parallel_token_logprobs(self.logits_shard, targets, self.vocab_start, self.group)

    def entropy(self) -> Tensor:
        return vocab_parallel_entropy(self.logits_shard, self.group)

    def logits_at(self, ids: Tensor) -> Tensor:
        return vocab_parallel_logits_at(self.logits_shard, ids, self.vocab_start, self.group)
