"""Which samples each trainer rank trains on.

A batch splits into `data_parallel_size` shards, and every rank gets the shard of its
data-parallel index: the tensor- and pipeline-parallel peers of one model copy share a shard.
The backend knows its ranks' indices (megatron's parallel_state orders them its own way), so
TrainGroup asks each worker once after setup (`TrainBackend.data_rank`) and checks the answers
here before any batch is sent. Pure: no Ray, no torch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TypeVar

from loongsage.training.errors import TrainerError

T = TypeVar("T")


@dataclass(frozen=True)
class DataLayout:
    shard_of_rank: tuple[int, ...]  # the data-parallel index of each rank, in rank order
    size: int  # data-parallel shards

    @property
    def reporting_ranks(self) -> tuple[int, ...]:
        """For each shard in order, the lowest rank holding it: the rank whose per-sample results are kept."""
        return tuple(self.shard_of_rank.index(shard) for shard in range(self.size))

    def per_rank(self, shards: list[T]) -> list[T]:
        """What each rank gets, in rank order, from one item per shard."""
        if len(shards) != self.size:
            raise ValueError(f"{len(shards)} shards for a data-parallel size of {self.size}")
        return [shards[shard] for shard in self.shard_of_rank]

    def per_shard(self, per_rank: list[T]) -> list[T]:
        """One result per shard, in shard order, from the results of every rank (peers' are equal)."""
        if len(per_rank) != len(self.shard_of_rank):
            raise ValueError(f"{len(per_rank)} results for {len(self.shard_of_rank)} ranks")
        return [per_rank[rank] for rank in self.reporting_ranks]


def data_layout(answers: list, size: int, size_named: str) -> DataLayout:
    """The layout from the workers' `data_rank` answers (in rank order), checked: every answer an
    index in 0..size-1 and every index held by the same number of ranks; TrainerError otherwise.
    `size_named` names the data-parallel size for the message ("trainer.megatron.dp=2")."""
    ranks = len(answers)
    if size < 1 or ranks % size:
        raise TrainerError(f"{ranks} trainer ranks cannot be split into {size_named} equal data-parallel groups")
    per_index = ranks // size
    valid = all(isinstance(a, int) and not isinstance(a, bool) and 0 <= a < size for a in answers)
    counts = Counter(answers)
    if not valid or any(counts[index] != per_index for index in range(size)):
        raise TrainerError(
            f"the train workers' data_rank() answers, by rank, are {list(answers)}; with {size_named} over {ranks} "
            f"ranks each data-parallel index 0..{size - 1} must be held by exactly {per_index} rank(s)"
        )
    return DataLayout(tuple(answers), size)
