"""Weight sync: every bucket to every engine, tagged with the new weight version, inside a
weight-update session on each engine (`session`).

gloo | nccl broadcast to a weight-update group (`distributed`). The others ride in
/update_weights_from_tensor, one `serialized_named_tensors` entry per tensor-parallel rank of
the engine: shm | inline in payloads only the embedded engine reads (`transports`); cuda_ipc in
SGLang's own (`ipc_bucket`: CUDA IPC handles on GPU, shared memory on CPU), what a colocated
SGLang engine takes from a trainer on its own GPU, where NCCL cannot put both in one
communicator (docs/sglang_protocol.md, difference 14).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

import torch

from loongsage.transfer.buckets import NamedTensors, Tally, iter_buckets
from loongsage.transfer.distributed import engine_tp_size, push_weights_distributed
from loongsage.transfer.ipc_bucket import shared_bucket
from loongsage.transfer.transports import PACKERS


def push_weights(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    version: int,
    bucket_bytes: int,
    transport: str = "shm",
    sender_host: str = "127.0.0.1",
) -> dict[str, float]:
    """`sender_host`: the address of this process's machine, as engines on it are named (and, for
    gloo | nccl, reach it)."""
    from loongsage.inference.client import EngineClient
    from loongsage.transfer.session import update_sessions

    if transport in GROUP_TRANSPORTS:
        return push_weights_distributed(named_tensors, engine_urls, version, bucket_bytes, transport, sender_host)
    if transport not in TENSOR_TRANSPORTS:
        raise ValueError(f"transfer transport {transport!r} is unknown; expected one of {sorted(TRANSPORTS)}")
    check_reach(transport, engine_urls, sender_host)
    clients = [EngineClient(url) for url in engine_urls]
    tally = Tally()
    try:
        ranks = [engine_tp_size(client) for client in clients]
        with update_sessions(clients):
            for bucket in iter_buckets(named_tensors, bucket_bytes):
                with _rank_entries(transport, bucket) as entry:
                    for client, tp_size in zip(clients, ranks):
                        client.update_weights_from_tensor(
                            # Made just before sending: an engine never reached costs no dump.
                            serialized_named_tensors=[entry() for _ in range(tp_size)],
                            load_format=None if transport == "cuda_ipc" else transport,
                            flush_cache=True,
                            weight_version=str(version),
                        )
                tally.add(tensor for _, tensor in bucket)
    finally:
        for client in clients:
            client.close()
    return tally.metrics()


@contextmanager
def _rank_entries(transport: str, bucket: NamedTensors) -> Iterator[Callable[[], object]]:
    """Makes one rank's `serialized_named_tensors` entry; what it refers to lives until the block ends."""
    if transport == "cuda_ipc":
        with shared_bucket(bucket) as shared:
            yield shared.serialize  # a dump per rank: SGLang's receivers count references per dump
    else:
        with PACKERS[transport](bucket) as payload:
            yield lambda: payload


GROUP_TRANSPORTS = ("gloo", "nccl")  # the backend of the weight-update group
TENSOR_TRANSPORTS = (*PACKERS, "cuda_ipc")
TRANSPORTS = (*TENSOR_TRANSPORTS, *GROUP_TRANSPORTS)
SAME_HOST_TRANSPORTS = ("shm", "cuda_ipc")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_reach(transport: str, engine_urls: list[str], sender_host: str) -> None:
    """A same-host transport cannot reach an engine on another machine: say so before sending."""
    if transport not in SAME_HOST_TRANSPORTS:
        return
    far = [url for url in engine_urls if urlparse(url).hostname not in (*LOOPBACK, sender_host)]
    if far:
        raise ValueError(
            f"trainer.weight_sync_transport={transport} reaches only engines on the trainer's machine "
            f"({sender_host}); {', '.join(far)} are on other machines: set "
            f"trainer.weight_sync_transport=nccl (GPU) or gloo (CPU), or inline (embedded engines only)"
        )
