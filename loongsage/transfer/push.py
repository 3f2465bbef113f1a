"""Weight sync over one transport: every bucket to every receiver, pipelined, inside a
weight-update session on each receiver (`session`), the new version on the last bucket only.

Pipelining: bucket k+1 is packed (gathered, copied into its shared segment, moved to the
sending device) on the caller's thread while bucket k is on the wire and being loaded on the
sender thread, so a push costs about max(pack, deliver) per bucket instead of their sum.

Versions: only the last bucket carries `weight_version`. A receiver that fails part way thus
never claims the new version; our engines stage a session's buckets and commit them with the
version-carrying one, so they also keep their old weights (SGLang loads in place: it keeps the
old version label, the router sees it lag, and it is out of rotation until it has the weights).
A receiver that failed is retried once on its own, then reported: the push returns the URLs of
the receivers that hold the new version, and the caller publishes only those.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlparse

import torch

from loongsage.transfer import distributed  # noqa: F401  (registers gloo, nccl)
from loongsage.transfer.buckets import NamedTensors, Tally, iter_buckets
from loongsage.transfer.channel import Channel, get_transport

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class PushResult:
    tally: Tally
    updated: list[str]  # receivers that hold the new version
    failed: dict[str, BaseException] = field(default_factory=dict)  # receiver URL -> why, after its retry
    retried: int = 0

    def metrics(self) -> dict[str, float]:
        return {
            **self.tally.metrics(),
            "transfer/retries": float(self.retried),
            "transfer/failed_receivers": float(len(self.failed)),
        }


class PushFailed(RuntimeError):
    """`errors`: receiver URL -> the error of its last attempt."""

    def __init__(self, errors: dict[str, BaseException]):
        self.errors = errors
        super().__init__("weight push failed for " + "; ".join(f"{url}: {why(exc)}" for url, exc in errors.items()))


def push_weights(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    version: int,
    bucket_bytes: int | None = None,
    transport: str = "shm",
    sender_host: str = "127.0.0.1",
    pipelined: bool = True,
) -> dict[str, float]:
    """Every engine gets the whole model over one transport; raises PushFailed naming each engine
    that did not get it (after its retry). `bucket_bytes` None: the transport's default.
    `sender_host`: this machine's address as engines on it are named (and, for gloo | nccl,
    reach it)."""
    named = list(named_tensors)
    result = push_buckets(
        lambda: _buckets(named, bucket_bytes, transport), engine_urls, version, transport, sender_host, pipelined
    )
    if result.failed:
        raise PushFailed(result.failed)
    return result.metrics()


def _buckets(named: NamedTensors, bucket_bytes: int | None, transport_name: str) -> Iterator[NamedTensors]:
    size = bucket_bytes if bucket_bytes is not None else get_transport(transport_name).bucket_mb * 1024 * 1024
    return iter_buckets(named, size)


def push_buckets(
    make_buckets,
    receiver_urls: Sequence[str],
    version: int,
    transport_name: str,
    sender_host: str = "127.0.0.1",
    pipelined: bool = True,
) -> PushResult:
    """`make_buckets()` -> the buckets, afresh for each attempt (a retry sends them again)."""
    check_reach(transport_name, receiver_urls, sender_host)
    check_device(transport_name)
    tally = Tally()
    failed = push_stream(versioned(make_buckets(), version), list(receiver_urls), transport_name, sender_host, pipelined, tally)
    retried = len(failed)
    still: dict[str, BaseException] = {}
    for url, error in failed.items():
        log.warning("weight push of version %d to %s failed (%s); retrying it alone", version, url, why(error))
        again = push_stream(versioned(make_buckets(), version), [url], transport_name, sender_host, pipelined, Tally())
        if again:
            still[url] = again[url]
            log.error("weight push of version %d to %s failed again: %s", version, url, why(again[url]))
    updated = [url for url in receiver_urls if url not in still]
    return PushResult(tally, updated, still, retried)


def versioned(buckets: Iterable[NamedTensors], version: int) -> Iterator[tuple[NamedTensors, str | None]]:
    """Each bucket with the weight version it carries: none but the last."""
    for bucket, last in _with_last(buckets):
        yield bucket, str(version) if last else None


def push_stream(
    items: Iterable[tuple[NamedTensors, str | None]],
    urls: list[str],
    transport_name: str,
    sender_host: str,
    pipelined: bool,
    tally: Tally,
) -> dict[str, BaseException]:
    """One attempt at delivering (bucket, weight version) items in order, inside a session on
    every receiver; returns the receivers that failed, with why. A relay forwards with it as
    the buckets arrive."""
    from loongsage.inference.client import EngineClient
    from loongsage.transfer.session import update_sessions

    clients = [EngineClient(url) for url in urls]
    channel: Channel | None = None
    try:
        with update_sessions(clients):
            # Closed before the sessions: SGLang serves session calls on its scheduler, which a
            # receive left pending by a refused distributed bucket blocks until the group is gone.
            channel = get_transport(transport_name).open(clients, sender_host)
            try:
                _stream(channel, items, pipelined, tally)
            finally:
                channel.close()
    except Exception as exc:  # a session call failed: every receiver is in doubt
        failed = dict(channel.failed) if channel is not None else {}
        for url in urls:
            failed.setdefault(url, exc)
        return failed
    finally:
        for client in clients:
            client.close()
    return dict(channel.failed)


def _stream(channel: Channel, items: Iterable[tuple[NamedTensors, str | None]], pipelined: bool, tally: Tally) -> None:
    """Deliver every bucket in order; pack the next while one is delivered. A bucket is posted
    only once the one before it was answered: the engines commit what they hold when the
    versioned bucket arrives, so nothing may overtake it."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="push-deliver") as sender:
        in_flight: tuple[Future, object] | None = None
        for bucket, version in items:
            packed = channel.pack(bucket)
            if in_flight is not None:
                _finish(channel, *in_flight)
            in_flight = (sender.submit(channel.deliver, packed, version), packed)
            tally.add(tensor for _, tensor in bucket)
            if not pipelined:
                _finish(channel, *in_flight)
                in_flight = None
        if in_flight is not None:
            _finish(channel, *in_flight)


def _finish(channel: Channel, delivered: Future, packed: object) -> None:
    try:
        delivered.result()
    finally:
        channel.release(packed)


def _with_last(items: Iterable) -> Iterator[tuple[object, bool]]:
    iterator = iter(items)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True


def why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def check_device(transport_name: str) -> None:
    """A GPU transport on a machine without one is a setting to change, not a receiver to retry."""
    if get_transport(transport_name).needs_gpu and not torch.cuda.is_available():
        raise RuntimeError(
            f"trainer.weight_sync={transport_name} needs CUDA on the trainer, and this process sees no GPU: "
            "set trainer.weight_sync=mesh (it chooses a transport this machine has), or trainer.weight_sync=gloo"
        )


def check_reach(transport_name: str, receiver_urls: Sequence[str], sender_host: str) -> None:
    """A same-host transport cannot reach a receiver on another machine: say so before sending."""
    if not get_transport(transport_name).same_host_only:
        return
    far = [url for url in receiver_urls if urlparse(url).hostname not in (*LOOPBACK, sender_host)]
    if far:
        raise ValueError(
            f"trainer.weight_sync={transport_name} reaches only engines on the trainer's machine "
            f"({sender_host}); {', '.join(far)} are on other machines: set trainer.weight_sync=mesh "
            f"(it picks a transport per engine), or nccl (GPU) / gloo (CPU)"
        )
