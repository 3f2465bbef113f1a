"""Weight sync by broadcast: the sender is rank 0 of a weight-update group the engines join.

SGLang's disaggregated update, with our own engines speaking the same calls: every engine
joins (`/init_weights_update_group`, ranks after the sender's, `tp_size` each), then per bucket
every engine is told the names, dtypes and shapes (`/update_weights_from_distributed`) while
the sender broadcasts the tensors in that order, then the group is destroyed everywhere. All of
it inside a weight-update session on every engine (`session`: SGLang 0.5.23 refuses updates
outside one, answering before it receives, like any refusal below).

A fresh group per push, named with a counter and a random suffix: an engine restarted since
the last push joins like the others, where a long-lived group would hang every broadcast on
the rank that is gone. Joining costs milliseconds against a push's seconds.

Failure: an engine that refuses a bucket answers before receiving anything (it checks the
names and shapes first), but the broadcast it should have taken part in would then wait for it
until the group's timeout. So the sender watches the engines' answers while it broadcasts,
stops at the first refusal, and destroys the group on every engine: the refusing engine's
leaving ends the pending broadcast, the sender's leaving ends the others' receives. The first
error is raised, naming its engine.
"""

from __future__ import annotations

import functools
import itertools
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from loongsage.transfer.buckets import Tally, iter_buckets
from loongsage.transfer.layout import DTYPES
from loongsage.transfer.process_group import WeightUpdateGroup

_pushes = itertools.count()


def push_weights_distributed(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    version: int,
    bucket_bytes: int,
    backend: str,
    sender_host: str,
) -> dict[str, float]:
    """`sender_host`: this machine's address as the engines reach it (they connect to it)."""
    from loongsage.inference.client import EngineClient
    from loongsage.transfer.session import update_sessions

    device = _sending_device(backend)
    clients = [EngineClient(url) for url in engine_urls]
    tally = Tally()
    ranks = [engine_tp_size(client) for client in clients]
    offsets = list(itertools.accumulate([1, *ranks[:-1]]))
    world_size = 1 + sum(ranks)
    group_name = f"loongsage-weights-{next(_pushes)}-v{version}-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    # Not `with`: after a failed join its exit would wait out the other engines' rendezvous.
    pool = ThreadPoolExecutor(max_workers=max(len(clients), 1), thread_name_prefix="weight-push")
    try:
        # Closed after the group is gone: SGLang handles session calls on the scheduler, which
        # a receive left pending by a refused bucket blocks until the group is destroyed.
        with update_sessions(clients):
            joins = [
                pool.submit(client.init_weights_update_group, sender_host, port, offset, world_size, group_name, backend)
                for client, offset in zip(clients, offsets)
            ]
            group = _join_watching(
                joins, clients, lambda: WeightUpdateGroup(backend, sender_host, port, 0, world_size, group_name)
            )
            failed = True
            try:
                _wait_all(joins, clients)
                for bucket in iter_buckets(named_tensors, bucket_bytes):
                    tensors = [_sendable(name, tensor, device) for name, tensor in bucket]
                    answers = [
                        pool.submit(
                            client.update_weights_from_distributed,
                            names=[name for name, _ in bucket],
                            dtypes=[str(t.dtype).removeprefix("torch.") for t in tensors],
                            shapes=[list(t.shape) for t in tensors],
                            group_name=group_name,
                            flush_cache=True,
                            weight_version=str(version),
                        )
                        for client in clients
                    ]
                    check = functools.partial(_raise_first_failure, answers, clients)
                    for tensor in tensors:
                        group.broadcast(tensor, src=0, check=check)
                    _wait_all(answers, clients)
                    tally.add(tensors)
                failed = False
            finally:
                _destroy_everywhere(clients, group_name, group, raise_errors=not failed)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for client in clients:
            client.close()
    return tally.metrics()


def _sending_device(backend: str) -> torch.device:
    if backend == "gloo":
        return torch.device("cpu")
    if backend != "nccl":
        raise ValueError(f"weight-update group backend {backend!r} is not one of gloo, nccl")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "trainer.weight_sync_transport=nccl needs CUDA on the trainer, and this process sees no GPU: "
            "set trainer.weight_sync_transport=gloo (or shm / inline)"
        )
    return torch.device("cuda", torch.cuda.current_device())


def _sendable(name: str, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The engines receive into contiguous tensors of the announced dtype and shape."""
    if str(tensor.dtype).removeprefix("torch.") not in DTYPES:
        raise TypeError(f"cannot transfer {name}: dtype {tensor.dtype} is not supported")
    return tensor.detach().to(device).contiguous()


def engine_tp_size(client) -> int:
    """The ranks an engine adds to the group: SGLang reports tp_size; our engine has one."""
    size = client.get_server_info().get("tp_size", 1)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"{client.base_url}/get_server_info: tp_size={size!r} is not a positive integer")
    return size


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _join_watching(joins: list[Future], clients, join: Callable[[], WeightUpdateGroup]) -> WeightUpdateGroup:
    """Join as rank 0 on a thread of its own, so that an engine refusing to join is reported at
    once instead of after the rendezvous timeout (the joining thread then waits it out alone)."""
    result: dict = {}

    def run():
        try:
            result["group"] = join()
        except BaseException as exc:  # re-raised on the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=run, name="weight-group-join", daemon=True)
    thread.start()
    pause = 0.001
    while thread.is_alive():
        _raise_first_failure(joins, clients)
        thread.join(pause)
        pause = min(pause * 2, 0.05)
    if "error" in result:
        _raise_first_failure(joins, clients)  # an engine's refusal says more than the rendezvous error
        raise RuntimeError(f"joining the weight-update group as its sender failed: {result['error']}") from result["error"]
    return result["group"]


def _raise_first_failure(futures: list[Future], clients) -> None:
    for future, client in zip(futures, clients):
        if future.done() and future.exception() is not None:
            raise _with_url(future.exception(), client)


def _wait_all(futures: list[Future], clients) -> None:
    for future, client in zip(futures, clients):
        exc = future.exception()
        if exc is not None:
            raise _with_url(exc, client)


def _with_url(exc: BaseException, client) -> BaseException:
    """EngineError names its URL already; anything else gets it added."""
    if client.base_url in str(exc):
        return exc
    wrapped = RuntimeError(f"{client.base_url}: {type(exc).__name__}: {exc}")
    wrapped.__cause__ = exc
    return wrapped


def _destroy_everywhere(clients, group_name: str, group: WeightUpdateGroup, raise_errors: bool) -> None:
    """Every engine leaves before the sender does: after a refusal the sender's broadcast is
    pending until the refusing engine has left, and `close` waits for it. Threads of their own:
    the push's threads may all be busy receiving until the sender has left."""
    with ThreadPoolExecutor(max_workers=max(len(clients), 1), thread_name_prefix="weight-leave") as pool:
        leaves = [pool.submit(client.destroy_weights_update_group, group_name) for client in clients]
        # A busy engine answers at once and leaves when its receive ends, i.e. once we have closed.
        errors = [(future.exception(), client) for future, client in zip(leaves, clients)]
    group.close()
    first = next(((exc, client) for exc, client in errors if exc is not None), None)
    if first is not None and raise_errors:
        raise _with_url(*first)
