"""The receive side of the shm transport: the senders' shared-memory segments as this process
maps them, and the bucket's tensors as views into them."""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from loongsage.inference.weight_wire.layout import NamedTensors, view_flat


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
def shm_views(payload: dict) -> Iterator[NamedTensors]:
    mapping = ATTACHED.open(payload["shm_name"])
    flat = torch.frombuffer(mapping, dtype=torch.uint8)
    views = view_flat(flat, payload["tensors"])
    try:
        yield views
    finally:
        views.clear()
        del flat


def unpack_shm(payload: dict) -> NamedTensors:
    """The bucket copied out of its segment into tensors of its own."""
    with shm_views(payload) as views:
        return [(name, view.clone()) for name, view in views]
