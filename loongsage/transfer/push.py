"""Weight sync v0: every bucket to every engine, tagged with the new weight version."""

from __future__ import annotations

import time
from collections.abc import Iterable
from urllib.parse import urlparse

import torch

from loongsage.transfer.buckets import iter_buckets
from loongsage.transfer.cuda_ipc import push_weights_cuda_ipc
from loongsage.transfer.distributed import push_weights_distributed
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
    gloo | nccl, reach it). shm | inline ride in /update_weights_from_tensor, in payloads only
    the embedded engine reads; cuda_ipc too, in SGLang's own (`cuda_ipc`); gloo | nccl
    broadcast to a weight-update group (`distributed`). Either way inside a weight-update
    session on every engine (`session`)."""
    from loongsage.inference.client import EngineClient
    from loongsage.transfer.session import update_sessions

    if transport in GROUP_TRANSPORTS:
        return push_weights_distributed(named_tensors, engine_urls, version, bucket_bytes, transport, sender_host)
    if transport == "cuda_ipc":
        check_reach(transport, engine_urls, sender_host)
        return push_weights_cuda_ipc(named_tensors, engine_urls, version, bucket_bytes)
    if transport not in PACKERS:
        known = sorted([*PACKERS, *GROUP_TRANSPORTS, "cuda_ipc"])
        raise ValueError(f"transfer transport {transport!r} is unknown; expected one of {known}")
    check_reach(transport, engine_urls, sender_host)
    clients = [EngineClient(url) for url in engine_urls]
    start = time.perf_counter()
    num_bytes = num_buckets = 0
    try:
        with update_sessions(clients):
            for bucket in iter_buckets(named_tensors, bucket_bytes):
                with PACKERS[transport](bucket) as payload:
                    for client in clients:
                        client.update_weights_from_tensor(
                            serialized_named_tensors=[payload],
                            load_format=transport,
                            flush_cache=True,
                            weight_version=str(version),
                        )
                num_buckets += 1
                num_bytes += sum(t.numel() * t.element_size() for _, t in bucket)
    finally:
        for client in clients:
            client.close()
    return {
        "transfer/bytes": float(num_bytes),
        "transfer/buckets": float(num_buckets),
        "transfer/seconds": time.perf_counter() - start,
    }


GROUP_TRANSPORTS = ("gloo", "nccl")  # the backend of the weight-update group
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
