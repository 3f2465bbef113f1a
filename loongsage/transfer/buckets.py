"""Group named tensors into buckets of bounded size, in a stable order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

NamedTensors = list[tuple[str, torch.Tensor]]


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


@dataclass
class Tally:
    """What one stream moved (the mesh turns it into the push's metrics)."""

    num_bytes: int = 0
    num_buckets: int = 0

    def add(self, tensors: Iterable[torch.Tensor]) -> None:
        self.num_buckets += 1
        self.num_bytes += sum(t.numel() * t.element_size() for t in tensors)
