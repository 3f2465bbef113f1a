"""Group named tensors into buckets of bounded size, in a stable order."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch

from loongsage.inference.weight_wire.layout import NamedTensors


def iter_buckets(named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> Iterator[NamedTensors]:
    """Yield consecutive groups whose total size stays under `bucket_bytes`.

    A tensor larger than the budget travels alone rather than being split: receivers load
    whole parameters only.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    bucket: NamedTensors = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


class KeptBuckets(NamedTuple):
    buckets: dict[int, NamedTensors]  # by bucket index: those of the shares asked for
    total: int  # how many buckets the weights make in all


def share_buckets(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, shares: Collection[tuple[int, int]]
) -> KeptBuckets:
    """The buckets that fall in any of `shares`, each (share, of shares) holding the indices i
    with i % shares == share, and how many buckets there are in all. All of the tensors are read,
    one at a time, but only the kept buckets stay: a source sending one share of S holds about
    1/S of the weights."""
    kept: dict[int, NamedTensors] = {}
    count = 0
    for index, bucket in enumerate(iter_buckets(named_tensors, bucket_bytes)):
        count += 1
        if any(index % of == share for share, of in shares):
            kept[index] = bucket
    return KeptBuckets(kept, count)


@dataclass
class Tally:
    """What one stream moved (the mesh turns it into the push's metrics)."""

    num_bytes: int = 0
    num_buckets: int = 0

    def add(self, tensors: Iterable[torch.Tensor]) -> None:
        self.num_buckets += 1
        self.num_bytes += sum(t.numel() * t.element_size() for t in tensors)
