"""Transports: how one bucket's bytes get from the trainer to a receiver.

Each transport has a sender half (`pack`: a context manager whose payload stays valid
until every receiver has copied it) and a receiver half (`unpack`). The payload travels
in the `serialized_named_tensors` field of SGLang's `/update_weights_from_tensor`, with
the transport's name as `load_format`. These payloads only the embedded engine reads; `cuda_ipc`
(ipc_bucket, cuda_ipc) sends SGLang's own.
"""

from __future__ import annotations

import atexit
import base64
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from multiprocessing import resource_tracker, shared_memory

import torch

from loongsage.transfer.buckets import NamedTensors
from loongsage.transfer.layout import read_flat, table_of_contents, write_flat
from loongsage.transfer.sglang_payload import LOAD_FORMATS as SGLANG_LOAD_FORMATS
from loongsage.transfer.sglang_payload import decode_named_tensors

_CREATED_HERE: set[str] = set()


class SegmentPool:
    """Shared-memory segments kept from one bucket (and push) to the next. A fresh segment costs a
    page fault, zeroing included, on every 4 KiB page its first bucket writes: about as much
    again as copying the bucket in. A segment goes back to the pool once every receiver has
    answered (they copy out before answering); at most `keep` wait there, and what is left is
    unlinked at exit (or, after a crash, by multiprocessing's resource tracker)."""

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
        segment = shared_memory.SharedMemory(create=True, size=size)
        _CREATED_HERE.add(segment.name)
        return segment

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


def _unlink(segment: shared_memory.SharedMemory) -> None:
    segment.close()
    segment.unlink()
    _CREATED_HERE.discard(segment.name)


_SEGMENTS = SegmentPool()
atexit.register(_SEGMENTS.close)


@contextmanager
def pack_shm(bucket: NamedTensors) -> Iterator[dict]:
    """Same-host receivers: the bucket copied once into a shared-memory segment (from the pool),
    which each receiver copies out of."""
    entries, total = table_of_contents(bucket)
    segment = _SEGMENTS.take(max(total, 1))
    try:
        write_flat(bucket, torch.frombuffer(segment.buf, dtype=torch.uint8, count=total), entries)
        yield {"shm_name": segment.name, "tensors": entries}
    finally:
        _SEGMENTS.give_back(segment)


def unpack_shm(payload: dict) -> NamedTensors:
    segment = shared_memory.SharedMemory(name=payload["shm_name"])
    if segment.name not in _CREATED_HERE:
        # Attaching registers the segment with this process's resource tracker, which
        # would unlink it at exit although the sender owns it.
        resource_tracker.unregister(segment._name, "shared_memory")  # noqa: SLF001
    try:
        flat = torch.frombuffer(segment.buf, dtype=torch.uint8)
        tensors = read_flat(flat, payload["tensors"])
        del flat
        return tensors
    finally:
        segment.close()


@contextmanager
def pack_inline(bucket: NamedTensors) -> Iterator[dict]:
    """Any receiver reachable over HTTP: the bytes ride in the request body (base64)."""
    entries, total = table_of_contents(bucket)
    flat = torch.empty(total, dtype=torch.uint8)
    write_flat(bucket, flat, entries)
    yield {"data": base64.b64encode(flat.numpy().tobytes()).decode("ascii"), "tensors": entries}


def unpack_inline(payload: dict) -> NamedTensors:
    raw = bytearray(base64.b64decode(payload["data"]))
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return read_flat(flat, payload["tensors"])


PACKERS: dict[str, Callable[[NamedTensors], AbstractContextManager[dict]]] = {"shm": pack_shm, "inline": pack_inline}
UNPACKERS: dict[str, Callable[[dict], NamedTensors]] = {"shm": unpack_shm, "inline": unpack_inline}


def unpack_named_tensors(load_format: str | None, payload: dict | str) -> NamedTensors:
    """Receiver side: turn one `serialized_named_tensors` entry back into (name, tensor) pairs.
    SGLang's own formats (null, "direct", "flattened_bucket": what `cuda_ipc` sends) are
    pickles, decoded by `sglang_payload`; ours are JSON objects."""
    if load_format in SGLANG_LOAD_FORMATS:
        return decode_named_tensors(load_format, payload)
    if load_format not in UNPACKERS:
        known = sorted(UNPACKERS) + [f for f in SGLANG_LOAD_FORMATS if f is not None] + ["null"]
        raise ValueError(f"load_format {load_format!r} is not supported; expected one of {known}")
    if not isinstance(payload, dict) or "tensors" not in payload:
        raise ValueError("serialized_named_tensors entry must be an object with a 'tensors' table")
    return UNPACKERS[load_format](payload)
