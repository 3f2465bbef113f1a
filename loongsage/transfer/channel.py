"""Transports behind one interface, and their registry by name.

A transport opens a Channel to a set of receivers (engines, or relays that speak the engine
protocol). The push loop (`push.py`) drives every channel the same way, so pipelining,
versioning and failure handling exist once:

    packed = channel.pack(bucket, following=n)   # the sender's copy; on the caller's thread
    channel.deliver(packed)         # on the wire and taken in; on the sender thread
    channel.release(packed)         # after every receiver answered
    channel.close()

`pack` of bucket k+1 runs while `deliver` of bucket k is in flight, so a channel keeps at most
two packed buckets alive; a channel whose `max_in_flight` is above 1 has that many delivered at
once (concurrent deliver calls, so each receiver has the next bucket waiting when it finishes
one), and keeps one more packed. `deliver` records a receiver that fails in `failed` and keeps
serving the others where the transport allows (each receiver its own request); a transport whose
receivers share one collective fails them all together.

Registered here: shm, inline and cuda_ipc (`/update_weights_from_tensor`; shm and inline in
payloads only our engines and relays read, cuda_ipc in SGLang's own), gloo and nccl
(`/update_weights_from_distributed` to a weight-update group, `distributed.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Protocol

import torch

from loongsage.inference.weight_wire.layout import NamedTensors
from loongsage.transfer.ipc_bucket import IpcBucket
from loongsage.transfer.transports import pack_inline, pack_shm


class Channel(Protocol):
    failed: dict[str, BaseException]  # receiver URL -> why it stopped receiving
    # Optional: buckets delivered at once (concurrent `deliver` calls); 1 when absent.
    # max_in_flight: int

    def pack(self, bucket: NamedTensors, following: int | None = None) -> object:
        """`following`: how many buckets the stream packs after this one, counted up to the
        channel's `max_in_flight` (None: at least that many)."""
        ...

    def deliver(self, packed: object) -> None: ...

    def release(self, packed: object) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Transport:
    """`open(clients, sender_host)` -> Channel. `same_host_only`: reaches receivers on the
    sender's machine only. `bucket_mb`: the default bucket size, big enough that per-bucket
    overheads (an HTTP round trip, a collective's launch) vanish, small enough that two packed
    buckets in flight cost little memory."""

    name: str
    open: Callable[[Sequence, str], Channel]
    same_host_only: bool
    bucket_mb: int
    needs_gpu: bool = False


TRANSPORTS: dict[str, Transport] = {}


def register_transport(transport: Transport) -> Transport:
    if transport.name in TRANSPORTS:
        raise ValueError(f"transport {transport.name!r} is registered already")
    TRANSPORTS[transport.name] = transport
    return transport


def get_transport(name: str) -> Transport:
    if name not in TRANSPORTS:
        raise ValueError(f"transfer transport {name!r} is unknown; expected one of {sorted(TRANSPORTS)}")
    return TRANSPORTS[name]


class TensorChannel:
    """`/update_weights_from_tensor` to each receiver, all receivers at once (each loads in its
    own process), one `serialized_named_tensors` entry per tensor-parallel rank of the receiver.

    shm delivers two buckets at once (`max_in_flight`): the receiver copies one out while the
    next one's request is already waiting for it, instead of idling for a round trip and the
    thread hand-offs on both sides after each bucket (on 2 cores busy with the two copies, each
    hand-off can wait milliseconds for a core). Our receivers take a push's buckets in any order
    (a push commits with a separate update that carries the version)."""

    def __init__(self, name: str, clients: Sequence, tp_sizes: Sequence[int]):
        self.name = name
        self.live = dict(zip(clients, tp_sizes))
        self.failed: dict[str, BaseException] = {}
        self.max_in_flight = SHM_IN_FLIGHT if name == "shm" else 1
        self._lock = threading.Lock()
        self._packed = 0  # shm buckets packed and not released yet
        workers = max(len(self.live), 1) * self.max_in_flight
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"push-{name}")

    def pack(self, bucket: NamedTensors, following: int | None = None) -> tuple[ExitStack, Callable[[], object]]:
        stack = ExitStack()
        if self.name == "cuda_ipc":
            shared = IpcBucket(_staged_on_gpu(bucket))
            stack.callback(shared.release)
            return stack, shared.serialize  # a dump per rank: SGLang's receivers count references per dump
        if self.name == "shm":
            # Nothing in flight (the push's first bucket): the receivers wait for this copy alone,
            # so it takes both cores.
            with self._lock:
                idle = self._packed == 0
                self._packed += 1
            stack.callback(self._unpacked)
            # The last buckets (fewer follow than are in flight) are copied out while this sender has
            # nothing left to pack: the receivers may copy with both cores then.
            tail = following is not None and following < self.max_in_flight
            try:
                payload = stack.enter_context(pack_shm(bucket, threads=2 if idle else 1, copy_threads=2 if tail else 1))
            except BaseException:
                stack.close()
                raise
        else:
            payload = stack.enter_context(pack_inline(bucket))
        return stack, lambda: payload

    def _unpacked(self) -> None:
        with self._lock:
            self._packed -= 1

    def deliver(self, packed) -> None:
        _, entry = packed
        load_format = None if self.name == "cuda_ipc" else self.name
        with self._lock:
            live = list(self.live.items())

        def send(client, tp_size: int | Future):
            if isinstance(tp_size, Future):  # asked at open, answered while the first bucket was packed
                tp_size = tp_size.result()
            return client.update_weights_from_tensor(
                # Made just before sending: a receiver never reached costs no dump.
                serialized_named_tensors=[entry() for _ in range(tp_size)],
                load_format=load_format,
                flush_cache=True,
            )

        if len(live) == 1:  # on this thread: one hand-off fewer per bucket
            client, tp_size = live[0]
            try:
                send(client, tp_size)
            except Exception as exc:
                self._fail(client, exc)
            return
        sends = {client: self._pool.submit(send, client, tp_size) for client, tp_size in live}
        for client, sent in sends.items():
            if sent.exception() is not None:
                self._fail(client, sent.exception())

    def _fail(self, client, exc: BaseException) -> None:
        with self._lock:
            self.failed.setdefault(client.base_url, exc)
            self.live.pop(client, None)

    def release(self, packed) -> None:
        packed[0].close()

    def close(self) -> None:
        with self._lock:
            asked = list(self.live.items())
        for client, tp_size in asked:  # an engine that could not tell its tp_size fails, buckets or not
            if isinstance(tp_size, Future) and tp_size.exception() is not None:
                self._fail(client, tp_size.exception())
        self._pool.shutdown(wait=True)


def engine_tp_size(client) -> int:
    """The ranks an engine adds to the group: SGLang reports tp_size; our engine has one."""
    size = client.get_server_info().get("tp_size", 1)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"{client.base_url}/get_server_info: tp_size={size!r} is not a positive integer")
    return size


def _open_tensor_channel(name: str) -> Callable[[Sequence, str], TensorChannel]:
    def open_channel(clients: Sequence, sender_host: str) -> TensorChannel:
        channel = TensorChannel(name, clients, [1] * len(clients))
        # Each engine's tp_size is asked now and awaited at its first bucket, so the round trips
        # overlap the packing of that bucket; an engine that cannot tell fails alone, there.
        channel.live = {client: channel._pool.submit(engine_tp_size, client) for client in clients}
        return channel

    return open_channel


# shm: 256 MB buckets. Pushes of SmolLM2-135M fp32 (538 MB) on 2 cores, medians of 8 beside a
# 85 ms bound: 128 MB 106 ms, 256 MB 101 ms, 512 MB 99.5 ms (64 MB ~113, 32 MB ~132 earlier).
# Every bucket costs a round trip and thread hand-offs on cores busy copying, while the first
# bucket is packed, and the last two copied out, with both cores anyway (`pack`), so a few
# large buckets keep the machine's copy bandwidth busy; the sender's pool holds three segments.
SHM_IN_FLIGHT = 2
register_transport(Transport("shm", _open_tensor_channel("shm"), same_host_only=True, bucket_mb=256))
register_transport(Transport("inline", _open_tensor_channel("inline"), same_host_only=False, bucket_mb=64))
register_transport(Transport("cuda_ipc", _open_tensor_channel("cuda_ipc"), same_host_only=True, bucket_mb=512))


def _staged_on_gpu(bucket: NamedTensors) -> NamedTensors:
    """A bucket held in pinned host memory (a teacher store's) goes to this process's GPU by one
    DMA and is read there over IPC: faster than the receivers copying from a shared segment of
    pageable memory, and only the buckets in flight take GPU memory."""
    if not any(tensor.device.type == "cpu" and tensor.is_pinned() for _, tensor in bucket):
        return bucket
    device = torch.device("cuda", torch.cuda.current_device())
    staged = [(name, tensor.to(device, non_blocking=tensor.is_pinned())) for name, tensor in bucket]
    torch.cuda.current_stream().synchronize()  # the receivers read it from another process
    return staged
