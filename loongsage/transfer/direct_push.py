"""The single-process push: every engine gets the whole model straight from this process over one
transport, in one update round (`rounds.execute_plan` along `direct_plan`)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from loongsage.transfer.channel import get_transport
from loongsage.transfer.endpoints import SOURCE, engine_endpoints
from loongsage.transfer.push import PushFailed, check_device, check_reach
from loongsage.transfer.rounds import execute_plan
from loongsage.transfer.routes import Endpoint, Plan, Route


def push_weights(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    version: int,
    bucket_bytes: int | None = None,
    transport: str = "shm",
    sender_host: str = "127.0.0.1",
    pipelined: bool = True,
) -> dict[str, float]:
    """Raises PushFailed naming each engine that did not get the weights (after its retry).
    `bucket_bytes` None: the transport's default. `sender_host`: this machine's address as
    engines on it are named (and, for gloo | nccl, reach it). Returns the round's metrics."""
    check_reach(transport, engine_urls, sender_host)
    check_device(transport)
    bucket_mb = None if bucket_bytes is None else bucket_bytes / (1024 * 1024)  # plan_bucket_bytes takes it back whole
    report = execute_plan(
        direct_plan(engine_urls, transport, sender_host),
        SOURCE,
        named_tensors,
        engine_urls,
        version,
        sender_host,
        bucket_mb,
        pipelined,
    )
    if report.failed:
        raise PushFailed(report.failed)
    return report.metrics


def direct_plan(engine_urls: list[str], transport_name: str, source_host: str) -> Plan:
    """Every engine straight from one source over `transport_name`."""
    source = Endpoint(SOURCE, "source", source_host)
    engines = engine_endpoints(engine_urls)
    link = "host_shm" if get_transport(transport_name).same_host_only else "tcp"
    routes = [Route(SOURCE, e.name, transport_name, link) for e in engines]
    return Plan({e.name: e for e in [source, *engines]}, routes, [f"every engine over {transport_name}"])
