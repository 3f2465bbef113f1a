"""Weight sync by SGLang's own tensor payload (trainer.weight_sync_transport=cuda_ipc): what a
colocated SGLang engine takes from a trainer on its own GPU, where NCCL cannot put the two in
one communicator (docs/sglang_protocol.md, difference 14). Same host only.

Per bucket, every engine gets one entry per tensor-parallel rank (its /get_server_info tp_size),
rank i reading entry i, with load_format null (the model's load_weights), inside a weight-update
session. The bucket's tensors stay shared until the last engine has answered (`ipc_bucket`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch

from loongsage.transfer.buckets import iter_buckets
from loongsage.transfer.distributed import _tp_size
from loongsage.transfer.ipc_bucket import shared_bucket
from loongsage.transfer.session import update_sessions


def push_weights_cuda_ipc(
    named_tensors: Iterable[tuple[str, torch.Tensor]], engine_urls: list[str], version: int, bucket_bytes: int
) -> dict[str, float]:
    from loongsage.inference.client import EngineClient

    clients = [EngineClient(url) for url in engine_urls]
    start = time.perf_counter()
    num_bytes = num_buckets = 0
    try:
        ranks = [_tp_size(client) for client in clients]
        with update_sessions(clients):
            for bucket in iter_buckets(named_tensors, bucket_bytes):
                with shared_bucket(bucket) as shared:
                    for client, tp_size in zip(clients, ranks):
                        client.update_weights_from_tensor(
                            # Serialized just before sending: an engine never reached costs no dump.
                            serialized_named_tensors=[shared.serialize() for _ in range(tp_size)],
                            load_format=None,
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
