"""Sender half of SGLang's own tensor payload: one bucket made shareable, then serialized once per
receiving tensor-parallel rank as SGLang's `MultiprocessingSerializer.serialize(named_tensors,
output_str=True)`: base64 of a ForkingPickler dump of `[(name, tensor), ...]`.

CUDA tensors travel as CUDA IPC handles of the sender's own memory, so they must stay alive
until every engine has answered: the bucket holds them until `release`. The device is named by
UUID, as SGLang's senders do (its patched reductions): the engine may number its GPUs otherwise
(CUDA_VISIBLE_DEVICES).

CPU tensors are copied into one shared-memory segment per bucket, by torch's file_system
strategy: the pickle names the segment, and any process on the host can map it. The default
strategy, file_descriptor, pickles a descriptor that the receiver fetches from this process's
multiprocessing resource sharer, which only processes holding this process's authkey (its own
children) may connect to.

Segment lifetime: torch counts references inside the segment. Sharing counts the sender (1),
each dump adds one, each receiver's unpickling takes its dump's one back (and holds one while
mapped), and whoever brings the count to 0 unlinks the segment. A dump nobody unpickled (an
engine that refused the request first) would keep it in /dev/shm until this process exits, so
`release` takes those back before dropping the sender's own.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing
from torch.multiprocessing import reductions

from loongsage.inference.weight_wire.layout import NamedTensors, table_of_contents, write_flat

log = logging.getLogger(__name__)

_STRATEGY = threading.Lock()
_SHM_DIR = "/dev/shm"  # where shm_open puts torch's segments on Linux
# In torch's reduce_tensor arguments of a CUDA tensor: the device index.
_CUDA_DEVICE_ARG = 6


@contextmanager
def file_system_sharing() -> Iterator[None]:
    """torch reads its process-global sharing strategy both when a storage is moved to shared
    memory and when it is pickled (an already shared segment would otherwise be shared again by
    descriptor), so both happen in here. The strategy is restored on the way out: the rest of the
    process keeps its default. Another thread pickling a CPU tensor meanwhile shares it by file
    name as well, which any receiver can read."""
    with _STRATEGY:
        previous = torch.multiprocessing.get_sharing_strategy()
        torch.multiprocessing.set_sharing_strategy("file_system")
        try:
            yield
        finally:
            torch.multiprocessing.set_sharing_strategy(previous)


class IpcBucket:
    """One bucket's tensors, shareable; `serialize` once per receiving rank, `release` after the
    last engine has answered (see `shared_bucket`)."""

    def __init__(self, bucket: NamedTensors):
        for name, tensor in bucket:
            if tensor.device.type not in ("cpu", "cuda"):
                raise TypeError(f"cannot transfer {name} by cuda_ipc: its device is {tensor.device}")
        cpu = [(name, tensor) for name, tensor in bucket if tensor.device.type == "cpu"]
        entries, total = table_of_contents(cpu)
        self._flat: torch.Tensor | None = None
        self._shm_name: str | None = None
        self._dumps = 0
        views = iter(())
        if cpu:
            with file_system_sharing():
                self._flat = torch.empty(max(total, 1), dtype=torch.uint8).share_memory_()
            # The segment's name, as torch's file_system pickling records it (already shared: no copy).
            self._shm_name = self._flat.untyped_storage()._share_filename_cpu_()[1].decode()
            write_flat(cpu, self._flat, entries)
            views = iter(
                self._flat[e["offset"] : e["offset"] + e["nbytes"]].view(tensor.dtype).reshape(e["shape"])
                for e, (_, tensor) in zip(entries, cpu)
            )
        self.named: NamedTensors = [
            (name, next(views) if tensor.device.type == "cpu" else tensor.detach()) for name, tensor in bucket
        ]

    def serialize(self) -> str:
        """One rank's entry. Each call is its own dump, which that rank alone unpickles: torch's
        reference counts (shared memory, CUDA IPC) count one receiver per dump."""
        buf = io.BytesIO()
        with file_system_sharing():
            _Pickler(buf).dump(self.named)
        self._dumps += 1
        return base64.b64encode(buf.getvalue()).decode("ascii")

    def release(self) -> None:
        """Drop the tensors; the CPU segment is unlinked once no receiver maps it any longer."""
        if self._flat is not None:
            _take_back_unread_dumps(self._flat.untyped_storage(), self._shm_name, self._dumps)
        self.named, self._flat = [], None


@contextmanager
def shared_bucket(bucket: NamedTensors) -> Iterator[IpcBucket]:
    shared = IpcBucket(bucket)
    try:
        yield shared
    finally:
        shared.release()


def share_count(shm_name: str) -> int | None:
    """torch's reference count of a file_system segment (an int32 at its start, where
    RefcountedMapAllocator keeps it), None when it is gone (or not in /dev/shm)."""
    try:
        with open(os.path.join(_SHM_DIR, shm_name.lstrip("/")), "rb") as f:
            return int.from_bytes(f.read(4), "little", signed=True)
    except FileNotFoundError:
        return None


def _take_back_unread_dumps(storage: torch.UntypedStorage, shm_name: str | None, dumps: int) -> None:
    """Every engine has answered: the count is the sender's 1, plus one per dump nobody unpickled,
    plus one per receiver still mapping it. Bringing it to 1 is safe in every case: the segment is
    unlinked by whoever reaches 0 first (the sender, or a receiver still mapping it), later closes
    go below 0 and unlink nothing. (Unlinking the file ourselves is not: torch aborts the process
    whose close reaches 0 and finds the file gone.)"""
    count = share_count(shm_name) if shm_name else None
    if count is None or count == 1:
        return
    if not 1 < count <= 1 + dumps:  # not torch's count as we know it: leave it rather than guess
        log.warning("shared-memory segment %s: reference count %d after %d dumps; not released early", shm_name, count, dumps)
        return
    for _ in range(count - 1):
        storage._shared_decref()


class _Pickler(ForkingPickler):
    """ForkingPickler with CUDA devices named by UUID, like SGLang's patched reduce_tensor, whose
    receiver (`_rebuild_cuda_tensor_modified`) takes an index or a UUID."""

    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor) and obj.is_cuda:
            rebuild, args = reductions.reduce_tensor(obj)
            uuid = str(torch.cuda.get_device_properties(args[_CUDA_DEVICE_ARG]).uuid)
            return rebuild, (*args[:_CUDA_DEVICE_ARG], uuid, *args[_CUDA_DEVICE_ARG + 1 :])
        return NotImplemented
