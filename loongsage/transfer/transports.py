"""Transports: how one bucket's bytes get from the trainer to a receiver.

Each transport has a sender half (`pack`: a context manager whose payload stays valid
until every receiver has copied it) and a receiver half (`unpack`). The payload travels
in the `serialized_named_tensors` field of SGLang's `/update_weights_from_tensor`, with
the transport's name as `load_format`. These payloads only the embedded engine reads; `cuda_ipc`
(ipc_bucket, cuda_ipc) sends SGLang's own.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from multiprocessing import resource_tracker, shared_memory

import torch

from loongsage.transfer.buckets import NamedTensors
from loongsage.transfer.layout import read_flat, table_of_contents, write_flat
from loongsage.transfer.sglang_payload import LOAD_FORMATS as SGLANG_LOAD_FORMATS
from loongsage.transfer.sglang_payload import decode_named_tensors

_CREATED_HERE: set[str] = set()


@contextmanager
def pack_shm(bucket: NamedTensors) -> Iterator[dict]:
    """Same-host receivers: one POSIX shared-memory segment per bucket, copied once each side."""
    entries, total = table_of_contents(bucket)
    segment = shared_memory.SharedMemory(create=True, size=max(total, 1))
    _CREATED_HERE.add(segment.name)
    try:
        write_flat(bucket, torch.frombuffer(segment.buf, dtype=torch.uint8, count=total), entries)
        yield {"shm_name": segment.name, "tensors": entries}
    finally:
        segment.close()
        segment.unlink()
        _CREATED_HERE.discard(segment.name)


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
