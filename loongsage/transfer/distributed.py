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
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from loongsage.inference.weight_wire.layout import DTYPES, NamedTensors
from loongsage.inference.weight_wire.process_group import WeightUpdateGroup
from loongsage.transfer.channel import Transport, engine_tp_size, register_transport

_pushes = itertools.count()


class GroupChannel:
    """The trainer's rank 0 of a fresh weight-update group the receivers join (see the module
    docstring). A failure breaks the collective for everyone: every receiver still in the group
    is then failed with it, and nothing more is sent."""

    def __init__(self, backend: str, clients: Sequence, sender_host: str):
        """`sender_host`: this machine's address as the receivers reach it (they connect to it)."""
        self.device = _sending_device(backend)
        self.clients = list(clients)
        self.failed: dict[str, BaseException] = {}
        self.group_name = f"loongsage-weights-{next(_pushes)}-{uuid.uuid4().hex[:8]}"
        ranks = [engine_tp_size(client) for client in self.clients]
        offsets = list(itertools.accumulate([1, *ranks[:-1]]))
        world_size = 1 + sum(ranks)
        port = _free_port()
        # Not `with`: after a failed join its exit would wait out the other engines' rendezvous.
        self._pool = ThreadPoolExecutor(max_workers=max(len(self.clients), 1), thread_name_prefix="weight-push")
        self.group: WeightUpdateGroup | None = None
        try:
            joins = [
                self._pool.submit(
                    client.init_weights_update_group, sender_host, port, offset, world_size, self.group_name, backend
                )
                for client, offset in zip(self.clients, offsets)
            ]
            self.group = _join_watching(
                joins, self.clients, lambda: WeightUpdateGroup(backend, sender_host, port, 0, world_size, self.group_name)
            )
            _wait_all(joins, self.clients)
        except BaseException as exc:
            self._fail_all(exc)

    def pack(self, bucket: NamedTensors, following: int | None = None) -> tuple[list[str], list[torch.Tensor]]:
        return [name for name, _ in bucket], [_sendable(name, tensor, self.device) for name, tensor in bucket]

    def deliver(self, packed) -> None:
        if self.failed:
            return  # the group is broken: nobody is listening any more
        names, tensors = packed
        answers = [
            self._pool.submit(
                client.update_weights_from_distributed,
                names=names,
                dtypes=[str(t.dtype).removeprefix("torch.") for t in tensors],
                shapes=[list(t.shape) for t in tensors],
                group_name=self.group_name,
                flush_cache=True,
            )
            for client in self.clients
        ]
        try:
            check = functools.partial(_raise_first_failure, answers, self.clients)
            for tensor in tensors:
                self.group.broadcast(tensor, src=0, check=check)
            _wait_all(answers, self.clients)
        except BaseException as exc:
            self._fail_all(exc)

    def release(self, packed) -> None:
        pass  # the tensors go with the last reference to them

    def close(self) -> None:
        try:
            if self.group is not None:
                for url, exc in _destroy_everywhere(self.clients, self.group_name, self.group).items():
                    self.failed.setdefault(url, exc)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _fail_all(self, exc: BaseException) -> None:
        for client in self.clients:
            self.failed.setdefault(client.base_url, exc)


def _sending_device(backend: str) -> torch.device:
    if backend == "gloo":
        return torch.device("cpu")
    if backend != "nccl":
        raise ValueError(f"weight-update group backend {backend!r} is not one of gloo, nccl")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "trainer.weight_sync=nccl needs CUDA on the trainer, and this process sees no GPU: "
            "set trainer.weight_sync=mesh (it chooses a transport this machine has), or gloo"
        )
    return torch.device("cuda", torch.cuda.current_device())


def _sendable(name: str, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The engines receive into contiguous tensors of the announced dtype and shape."""
    if str(tensor.dtype).removeprefix("torch.") not in DTYPES:
        raise TypeError(f"cannot transfer {name}: dtype {tensor.dtype} is not supported")
    return tensor.detach().to(device).contiguous()


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


def _destroy_everywhere(clients, group_name: str, group: WeightUpdateGroup) -> dict[str, BaseException]:
    """Every engine leaves before the sender does: after a refusal the sender's broadcast is
    pending until the refusing engine has left, and `close` waits for it. Threads of their own:
    the push's threads may all be busy receiving until the sender has left. Returns the engines
    that failed to leave, by URL."""
    with ThreadPoolExecutor(max_workers=max(len(clients), 1), thread_name_prefix="weight-leave") as pool:
        leaves = [pool.submit(client.destroy_weights_update_group, group_name) for client in clients]
        # A busy engine answers at once and leaves when its receive ends, i.e. once we have closed.
        errors = {client.base_url: future.exception() for future, client in zip(leaves, clients)}
    group.close()
    return {url: _with_url(exc, client) for (url, exc), client in zip(errors.items(), clients) if exc is not None}


register_transport(Transport("gloo", lambda clients, host: GroupChannel("gloo", clients, host), False, bucket_mb=64))
register_transport(
    Transport("nccl", lambda clients, host: GroupChannel("nccl", clients, host), False, bucket_mb=512, needs_gpu=True)
)
