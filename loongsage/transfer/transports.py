"""Transports: how one bucket's bytes get from the trainer to a receiver.

Each transport has a sender half (`pack`: a context manager whose payload stays valid
until every receiver has copied it) and a receiver half (`unpack`, or `open_named_tensors`:
tensors valid inside a block, for a receiver that copies them where they go). The payload travels
in the `serialized_named_tensors` field of SGLang's `/update_weights_from_tensor`, with
the transport's name as `load_format`. These payloads only the embedded engine reads; `cuda_ipc`
(ipc_bucket, cuda_ipc) sends SGLang's own.
"""

from __future__ import annotations

import atexit
import base64
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from multiprocessing import shared_memory

import torch

from loongsage.transfer import shm_owners
from loongsage.transfer.buckets import NamedTensors
from loongsage.transfer.layout import read_flat, table_of_contents, view_flat, write_flat
from loongsage.transfer.sglang_payload import LOAD_FORMATS as SGLANG_LOAD_FORMATS
from loongsage.transfer.sglang_payload import decode_named_tensors


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


def unpack_shm(payload: dict) -> NamedTensors:
    """The bucket copied out of its segment into tensors of its own."""
    with _shm_views(payload) as views:
        return [(name, view.clone()) for name, view in views]


class AttachedSegments:
    """A receiver's mappings of the senders' segments, kept by name: the pool (`SegmentPool`)
    sends the same few segments push after push, and mapping one afresh costs a page-table
    fault per page the copy out reads (~25 ms per 540 MB measured), and the unmapping again.

    A name is checked on every use (shm_open, fstat: microseconds): a segment unlinked and made
    again under the same name is a new file and is mapped anew. A mapping keeps its segment's
    memory alive after the sender unlinked it, so `prune` drops those (each use prunes, as do
    the ends of weight-update sessions), at most `keep` are held, and `clear` drops them all (a
    receiver giving its memory back). A mapping in use by a copy stays valid until the copy's
    views are gone: nothing here unmaps it under them (mmap objects close when unreferenced)."""

    def __init__(self, keep: int = 6):
        self.keep = keep
        self._maps: OrderedDict[str, tuple[tuple[int, int], mmap.mmap]] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, name: str) -> mmap.mmap:
        """The segment's mapping; FileNotFoundError when no segment has that name."""
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"shm_name {name!r} is not a shared-memory segment name")
        fd = _shm_open(name)
        try:
            stat = os.fstat(fd)
            key = (stat.st_ino, stat.st_size)
            with self._lock:
                held = self._maps.get(name)
                if held is not None and held[0] == key:
                    self._maps.move_to_end(name)
                    mapping = held[1]
                else:
                    mapping = None
            if mapping is None:
                if stat.st_size == 0:
                    raise ValueError(f"shared-memory segment {name!r} is empty")
                # Page tables filled at once for what the sender wrote: no fault per page on the copy out.
                flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                mapping = mmap.mmap(fd, stat.st_size, flags=flags)
                with self._lock:
                    self._maps[name] = (key, mapping)
                    self._maps.move_to_end(name)
                    while len(self._maps) > self.keep:
                        self._maps.popitem(last=False)
        finally:
            os.close(fd)
        self.prune(keep=name)
        return mapping

    def prune(self, keep: str | None = None) -> None:
        """Drop the mappings of segments unlinked (or replaced) since they were mapped."""
        with self._lock:
            held = [(name, key) for name, (key, _) in self._maps.items() if name != keep]
        gone = []
        for name, key in held:
            try:
                fd = _shm_open(name)
            except FileNotFoundError:
                gone.append(name)
                continue
            try:
                stat = os.fstat(fd)
                if (stat.st_ino, stat.st_size) != key:
                    gone.append(name)
            finally:
                os.close(fd)
        if gone:
            with self._lock:
                for name in gone:
                    self._maps.pop(name, None)

    def clear(self) -> None:
        with self._lock:
            self._maps.clear()

    def __len__(self) -> int:
        return len(self._maps)


def _shm_open(name: str) -> int:
    from _posixshmem import shm_open  # what multiprocessing.shared_memory itself opens segments with

    return shm_open("/" + name, os.O_RDWR, 0o600)


ATTACHED = AttachedSegments()


@contextmanager
def _shm_views(payload: dict) -> Iterator[NamedTensors]:
    mapping = ATTACHED.open(payload["shm_name"])
    flat = torch.frombuffer(mapping, dtype=torch.uint8)
    views = view_flat(flat, payload["tensors"])
    try:
        yield views
    finally:
        views.clear()
        del flat


@contextmanager
def open_named_tensors(load_format: str | None, payload: dict | str) -> Iterator[tuple[NamedTensors, bool]]:
    """Receiver side, for a receiver that copies the tensors where they go: (named tensors, owned)
    valid inside the block only. shm: views into the sender's segment, which the sender keeps
    until this receiver answers (owned False: copy them before leaving the block; no copy is
    made here). Other formats: unpacked as `unpack_named_tensors` does (owned True: made for
    this call alone, keep them if you like). Raises as `unpack_named_tensors` does."""
    if load_format == "shm":
        _check_payload(payload)
        with _shm_views(payload) as views:
            yield views, False
    else:
        yield unpack_named_tensors(load_format, payload), True


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
    _check_payload(payload)
    return UNPACKERS[load_format](payload)


def _check_payload(payload) -> None:
    if not isinstance(payload, dict) or not isinstance(payload.get("tensors"), list):
        raise ValueError("serialized_named_tensors entry must be an object with a 'tensors' table")
