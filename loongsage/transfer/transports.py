"""Transports, sender half: how one bucket's bytes get from the trainer to a receiver.

Each transport packs a bucket (`pack`: a context manager whose payload stays valid until every
receiver has copied it); the receiver half, which engines run, is `inference.weight_wire.unpack`.
The payload travels in the `serialized_named_tensors` field of SGLang's
`/update_weights_from_tensor`, with the transport's name as `load_format`. These payloads only
the embedded engine reads; `cuda_ipc` (ipc_bucket, cuda_ipc) sends SGLang's own.
"""

from __future__ import annotations

import atexit
import base64
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from multiprocessing import shared_memory

import torch

from loongsage.inference.weight_wire.layout import NamedTensors, table_of_contents, write_flat
from loongsage.transfer import shm_owners


class SegmentPool:
    """Shared-memory segments kept from one bucket (and push) to the next. A fresh segment costs a
    page fault, zeroing included, on every 4 KiB page its first bucket writes: about as much
    again as copying the bucket in. A segment goes back to the pool once every receiver has
    answered (they copy out before answering); at most `keep` wait there, and what is left is
    unlinked at exit (or, after a crash, by multiprocessing's resource tracker). A segment is
    named after this process (`shm_owners`): a kill that takes the tracker too (ray.kill, a
    killed process group) leaves segments that the next pool to make one, or the run's end, unlinks.

    Sizes are rounded up to a power of two, so buckets of slightly different sizes reuse the
    same segments (and the receivers' mappings of them, `AttachedSegments`) push after push."""

    def __init__(self, keep: int = 3):
        self.keep = keep
        self._free: list[shared_memory.SharedMemory] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> shared_memory.SharedMemory:
        with self._lock:
            fitting = [s for s in self._free if s.size >= size]
            if fitting:
                segment = min(fitting, key=lambda s: s.size)
                self._free.remove(segment)
                return segment
        shm_owners.sweep_orphans()  # what killed owners left (a segment is made rarely: a listdir is nothing)
        return shared_memory.SharedMemory(name=shm_owners.new_name(), create=True, size=_rounded(size))

    def give_back(self, segment: shared_memory.SharedMemory) -> None:
        with self._lock:
            self._free.append(segment)
            self._free.sort(key=lambda s: s.size, reverse=True)  # the biggest are the most reusable
            spare = self._free[self.keep :]
            del self._free[self.keep :]
        for extra in spare:
            _unlink(extra)

    def close(self) -> None:
        with self._lock:
            spare, self._free = self._free, []
        for segment in spare:
            _unlink(segment)


def _rounded(size: int) -> int:
    return max(1 << 20, 1 << (size - 1).bit_length())


def _unlink(segment: shared_memory.SharedMemory) -> None:
    segment.close()
    segment.unlink()


_SEGMENTS = SegmentPool(keep=3)  # shm has two buckets in flight while it packs a third
atexit.register(_SEGMENTS.close)


@contextmanager
def pack_shm(bucket: NamedTensors, threads: int = 1, copy_threads: int = 1) -> Iterator[dict]:
    """Same-host receivers: the bucket copied once into a shared-memory segment (from the pool),
    which each receiver copies out of. `threads`: as `layout.write_flat` takes it;
    `copy_threads`: how many threads the receivers may copy it out with (a hint)."""
    entries, total = table_of_contents(bucket)
    segment = _SEGMENTS.take(max(total, 1))
    try:
        write_flat(bucket, torch.frombuffer(segment.buf, dtype=torch.uint8, count=total), entries, threads)
        yield {"shm_name": segment.name, "tensors": entries, "copy_threads": copy_threads}
    finally:
        _SEGMENTS.give_back(segment)


@contextmanager
def pack_inline(bucket: NamedTensors) -> Iterator[dict]:
    """Any receiver reachable over HTTP: the bytes ride in the request body (base64)."""
    entries, total = table_of_contents(bucket)
    flat = torch.empty(total, dtype=torch.uint8)
    write_flat(bucket, flat, entries)
    yield {"data": base64.b64encode(flat.numpy().tobytes()).decode("ascii"), "tensors": entries}


PACKERS: dict[str, Callable[[NamedTensors], AbstractContextManager[dict]]] = {"shm": pack_shm, "inline": pack_inline}
