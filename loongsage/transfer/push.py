"""Moving buckets over one transport to a set of receivers (engines or relays), pipelined.

Bucket k+1 is packed (gathered, copied into its shared segment, moved to the sending device) on
the caller's thread while bucket k is on the wire and being taken in on the sender thread, so a
push costs about max(pack, deliver) per bucket instead of their sum. Buckets carry no weight
version and no session is opened here: the update round (`update_round`) opens the receivers'
sessions and switches their version once every sender is done, so any number of senders can
feed one receiver.

A receiver that fails is dropped from the stream (the others go on), retried once on its own,
then reported.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlparse

import torch

from loongsage.inference.weight_wire.layout import NamedTensors
from loongsage.transfer import distributed  # noqa: F401  (registers gloo, nccl)
from loongsage.transfer.buckets import Tally
from loongsage.transfer.channel import Channel, get_transport

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class PushResult:
    tally: Tally
    failed: dict[str, BaseException] = field(default_factory=dict)  # receiver URL -> why, after its retry
    retried: int = 0


class PushFailed(RuntimeError):
    """`errors`: receiver URL -> why it did not get the weights."""

    def __init__(self, errors: dict[str, BaseException | str]):
        self.errors = errors
        super().__init__("weight push failed for " + "; ".join(f"{url}: {why(exc)}" for url, exc in errors.items()))


def push_with_retry(
    make_buckets: Callable[[], Iterable[NamedTensors]],
    receiver_urls: Sequence[str],
    transport_name: str,
    sender_host: str = "127.0.0.1",
    pipelined: bool = True,
) -> PushResult:
    """`make_buckets()` -> the buckets, afresh for each attempt (a retry sends them again)."""
    check_reach(transport_name, receiver_urls, sender_host)
    check_device(transport_name)
    tally = Tally()
    # The buckets are in memory: looking ahead costs nothing.
    failed = push_stream(make_buckets(), list(receiver_urls), transport_name, sender_host, pipelined, tally, True)
    still: dict[str, BaseException] = {}
    for url, error in failed.items():
        log.warning("weight push to %s failed (%s); retrying it alone", url, why(error))
        again = push_stream(make_buckets(), [url], transport_name, sender_host, pipelined, Tally(), True)
        if again:
            still[url] = again[url]
            log.error("weight push to %s failed again: %s", url, why(again[url]))
    return PushResult(tally, still, len(failed))


def push_stream(
    buckets: Iterable[NamedTensors],
    urls: list[str],
    transport_name: str,
    sender_host: str,
    pipelined: bool,
    tally: Tally,
    look_ahead: bool = False,
) -> dict[str, BaseException]:
    """One attempt at delivering the buckets in order; returns the receivers that failed, with
    why. A relay forwards with it as the buckets arrive. `look_ahead`: the buckets may be taken
    from `buckets` before they are packed, to tell the channel which ones come last (not for a
    relay: a bucket would wait for the next ones to arrive)."""
    from loongsage.inference.client import EngineClient

    clients = [EngineClient(url) for url in urls]
    channel: Channel | None = None
    try:
        channel = get_transport(transport_name).open(clients, sender_host)
        try:
            _stream(channel, buckets, pipelined, tally, look_ahead)
        finally:
            channel.close()
    except Exception as exc:  # opening the channel or the stream itself failed: every receiver is in doubt
        failed = dict(channel.failed) if channel is not None else {}
        for url in urls:
            failed.setdefault(url, exc)
        return failed
    finally:
        for client in clients:
            client.close()
    return dict(channel.failed)


def _stream(channel: Channel, buckets: Iterable[NamedTensors], pipelined: bool, tally: Tally, look_ahead: bool) -> None:
    """Deliver every bucket in order; pack the next while one is delivered (or, for a channel
    with `max_in_flight` above 1, while that many are)."""
    depth = max(1, getattr(channel, "max_in_flight", 1)) if pipelined else 1
    with ThreadPoolExecutor(max_workers=depth, thread_name_prefix="push-deliver") as sender:
        in_flight: deque[tuple[Future, object]] = deque()
        try:
            for bucket, following in _looking_ahead(buckets, depth) if look_ahead else ((b, None) for b in buckets):
                packed = channel.pack(bucket, following=following)
                while len(in_flight) >= depth:
                    _finish(channel, *in_flight.popleft())
                in_flight.append((sender.submit(channel.deliver, packed), packed))
                tally.add(tensor for _, tensor in bucket)
                if not pipelined:
                    _finish(channel, *in_flight.popleft())
            while in_flight:
                _finish(channel, *in_flight.popleft())
        finally:
            for delivered, packed in in_flight:  # after a failure: each released once it is answered
                delivered.exception()
                channel.release(packed)


def _looking_ahead(buckets: Iterable[NamedTensors], ahead: int) -> Iterator[tuple[NamedTensors, int | None]]:
    """Each bucket with how many follow it, counted up to `ahead` (None: `ahead` or more)."""
    iterator = iter(buckets)
    window: deque[NamedTensors] = deque()
    for bucket in iterator:
        window.append(bucket)
        if len(window) > ahead:
            yield window.popleft(), None
    while window:
        yield window.popleft(), len(window)


def _finish(channel: Channel, delivered: Future, packed: object) -> None:
    try:
        delivered.result()
    finally:
        channel.release(packed)


def why(exc: BaseException | str) -> str:
    return exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"


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
