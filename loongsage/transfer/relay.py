"""A node relay: takes a push as an engine would, and forwards each bucket to the receivers it
feeds (the engines of its host, relays on other hosts) as it arrives, so the weights cross to a
node once and fan out there.

It speaks the engine's side of the weight-update protocol (/update_weights_from_tensor, the
weight-update group calls, /get_server_info with tp_size 1), so a sender pushes to a relay with
the code it pushes to an engine with, and several senders may feed it at once (each bringing a
share). Forwarding goes over the relay's own routes (from the plan: shm on a CPU host, cuda_ipc
on a GPU host) through `push.push_stream`, one thread per transport, fed through a queue of two
buckets: bucket k is forwarded while k+1 is received. A bucket is answered once it is queued.

Its session is the update round's (`update_round`): /begin_weight_update starts the forwarding,
/end_weight_update waits until everything received has been forwarded and answers with the
receivers that could not be reached (`failed`: URL -> why). The round opens and commits the
engines' sessions itself, so a relay never switches a version.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from loongsage.http_server import AppServer
from loongsage.inference.weight_wire.layout import DTYPES, NamedTensors
from loongsage.inference.weight_wire.process_group import WeightUpdateGroup
from loongsage.inference.weight_wire.unpack import unpack_named_tensors
from loongsage.transfer.buckets import Tally
from loongsage.transfer.push import push_stream, why

log = logging.getLogger(__name__)

_END = None  # closes a forwarding queue


class RelayRefused(ValueError):
    """The request is wrong (HTTP 400)."""


class Relay:
    """`forwards`: transport -> the URLs of the receivers this relay feeds over it. `host`: this
    machine's address as those engines name it. `device`: where received buckets are held, "cpu"
    (a CPU host: gloo in, shm out) or "cuda:<i>" (the GPU nearest the relay's NIC: nccl in,
    cuda_ipc out, the engines reading the bucket from this GPU over NVLink)."""

    def __init__(self, forwards: Mapping[str, list[str]], host: str, pipelined: bool = True, device: str = "cpu"):
        self.forwards = {transport: list(urls) for transport, urls in forwards.items()}
        self.host = host
        self.device = torch.device(device)
        self.backend = "nccl" if self.device.type == "cuda" else "gloo"
        self.pipelined = pipelined
        self._forwarding: _Forwarding | None = None
        self._groups: dict[str, WeightUpdateGroup] = {}
        self._lock = threading.Lock()

    def begin(self) -> None:
        with self._lock:
            if self._forwarding is not None:
                raise RelayRefused("a weight-update session is already open; call end_weight_update() first")
            self._forwarding = _Forwarding(self.forwards, self.host, self.pipelined)

    def end(self) -> dict[str, str]:
        """Once everything received is forwarded: the receivers that were not reached, with why."""
        with self._lock:
            forwarding, self._forwarding = self._forwarding, None
        if forwarding is None:
            raise RelayRefused("no weight-update session is open; call begin_weight_update() first")
        forwarding.stop()
        return {url: why(exc) for url, exc in forwarding.failed.items()}

    def take(self, named: NamedTensors) -> int:
        """Queue a received bucket for every forwarding route."""
        forwarding = self._forwarding
        if forwarding is None:
            raise RelayRefused("update_weights must run between begin_weight_update() and end_weight_update()")
        forwarding.put(named)
        return len(named)

    def join_group(self, body: dict) -> None:
        name = body["group_name"]
        if body.get("backend") != self.backend:
            raise RelayRefused(
                f"backend {body.get('backend')!r}: this relay holds buckets on {self.device}, joins {self.backend}"
            )
        group = WeightUpdateGroup(
            self.backend,
            body["master_address"],
            int(body["master_port"]),
            int(body["rank_offset"]),
            int(body["world_size"]),
            name,
        )
        with self._lock:
            self._groups[name] = group

    def receive(self, body: dict) -> NamedTensors:
        group = self._groups.get(body.get("group_name", ""))
        if group is None:
            raise RelayRefused(f"no weight-update group named {body.get('group_name')!r}")
        received = []
        for name, dtype, shape in zip(body["names"], body["dtypes"], body["shapes"]):
            tensor = torch.empty(shape, dtype=DTYPES[dtype], device=self.device)
            group.broadcast(tensor, src=0)
            received.append((name, tensor))
        return received

    def leave_group(self, name: str) -> None:
        with self._lock:
            group = self._groups.pop(name, None)
        if group is not None:
            group.close()


class _Forwarding:
    """One session's forwarding: a thread per transport, each pushing what its queue yields."""

    def __init__(self, forwards: Mapping[str, list[str]], host: str, pipelined: bool):
        self.stopped = False
        self.lock = threading.Lock()
        self.queues = {transport: queue.Queue(maxsize=2) for transport in forwards}
        self.failed: dict[str, BaseException] = {}
        self.threads = [
            threading.Thread(target=self._run, args=(transport, urls, host, pipelined), name=f"relay-{transport}", daemon=True)
            for transport, urls in forwards.items()
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, transport: str, urls: list[str], host: str, pipelined: bool) -> None:
        items = iter(self.queues[transport].get, _END)
        try:
            self.failed.update(push_stream(items, urls, transport, host, pipelined, Tally()))
        finally:
            for _ in items:  # drain, so a sender blocked on a full queue goes on
                pass

    def put(self, named: NamedTensors) -> None:
        with self.lock:  # several senders: each queue gets whole buckets, in one order
            for waiting in self.queues.values():
                waiting.put(named)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        for waiting in self.queues.values():
            waiting.put(_END)
        for thread in self.threads:
            thread.join()


def relay_app(relay: Relay) -> FastAPI:
    app = FastAPI()

    async def call(function, *args):
        try:
            return await run_in_threadpool(function, *args)
        except (RelayRefused, KeyError, TypeError, ValueError) as exc:
            return JSONResponse({"success": False, "message": f"relay: {exc}"}, status_code=400)
        except Exception as exc:  # noqa: BLE001  (the sender reads why from the answer)
            return JSONResponse({"success": False, "message": f"relay: {why(exc)}"}, status_code=500)

    def ok(message: str) -> dict:
        return {"success": True, "message": message}

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def server_info():
        return {"tp_size": 1, "relay_for": relay.forwards}

    @app.post("/begin_weight_update")
    async def begin(request: Request):
        return await call(lambda: relay.begin() or ok("Success"))

    @app.post("/end_weight_update")
    async def end(request: Request):
        return await call(lambda: {**ok("Success"), "failed": relay.end()})

    @app.post("/update_weights_from_tensor")
    async def from_tensor(request: Request):
        body = await request.json()

        def take():
            (payload,) = body["serialized_named_tensors"]
            named = unpack_named_tensors(body.get("load_format"), payload)
            return ok(f"forwarding {relay.take(named)} tensors")

        return await call(take)

    @app.post("/init_weights_update_group")
    async def init_group(request: Request):
        body = await request.json()
        return await call(lambda: relay.join_group(body) or ok(f"joined {body.get('group_name')!r}"))

    @app.post("/update_weights_from_distributed")
    async def from_distributed(request: Request):
        body = await request.json()
        return await call(lambda: ok(f"forwarding {relay.take(relay.receive(body))} tensors"))

    @app.post("/destroy_weights_update_group")
    async def destroy_group(request: Request):
        body = await request.json()
        return await call(lambda: relay.leave_group(body.get("group_name", "")) or ok("destroyed"))

    return app


class RelayServer(AppServer):
    def __init__(self, relay: Relay, host: str = "127.0.0.1", port: int = 0):
        super().__init__(relay_app(relay), host, port, name="transfer-relay")
        self.relay = relay


class RelayActor:
    """A relay as a Ray actor on its node: `forwards` as for Relay, `host` the node's address
    (the relay serves there, for senders on other nodes), `gpu` the physical index of the GPU it
    holds buckets on (None on a CPU host); the actor is started seeing all of the node's GPUs."""

    def __init__(self, forwards: Mapping[str, list[str]], host: str, gpu: int | None = None):
        device = "cpu"
        if gpu is not None:
            torch.cuda.set_device(gpu)
            device = f"cuda:{gpu}"
        self.server = RelayServer(Relay(forwards, host, device=device), host=host)

    def start(self) -> str:
        return self.server.start()

    def stop(self) -> None:
        self.server.stop()
