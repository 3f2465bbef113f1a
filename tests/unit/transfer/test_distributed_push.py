"""The sender's side of weight sync by broadcast, against SGLang-protocol stand-ins.

The stand-ins are real HTTP servers whose ranks are real gloo group members: what they
receive is what the sender broadcast, through the group it set up.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from loongsage.http_server import AppServer
from loongsage.inference.weight_wire.layout import DTYPES
from loongsage.inference.weight_wire.process_group import WeightUpdateGroup
from loongsage.transfer import PushFailed, push_weights

SESSIONLESS = "update_weights_from_distributed must run between begin_weight_update() and end_weight_update()"


class StandIn:
    """An engine of `tp_size` ranks (SGLang's shape: one HTTP server, a rank per GPU) that keeps
    every tensor each rank receives, and takes updates only inside a weight-update session, as
    SGLang 0.5.23 does (`sessions=False`: an older SGLang, without the session endpoints).
    `server_info` replaces its /get_server_info answer; `refuse_init` / `refuse_update` make it
    answer /init_weights_update_group / /update_weights_from_distributed with a 400 (the
    update's before receiving). `events` lists the calls it took, in order."""

    def __init__(
        self,
        tp_size: int = 1,
        server_info: dict | None = None,
        refuse_init: bool = False,
        refuse_update: bool = False,
        sessions: bool = True,
    ):
        self.tp_size = tp_size
        self.events: list[str] = []
        self.session_open = False
        self.inits: list[dict] = []
        self.received: list[list[tuple[str, torch.Tensor]]] = [[] for _ in range(tp_size)]
        self.versions: list[str] = []
        self.groups: dict[str, list[WeightUpdateGroup]] = {}
        self.pool = ThreadPoolExecutor(tp_size)
        app = FastAPI()
        info = {"tp_size": tp_size} if server_info is None else server_info

        @app.get("/get_server_info")
        def get_server_info():
            return info

        @app.post("/init_weights_update_group")
        def init(body: dict):
            if refuse_init:
                return JSONResponse({"error": {"message": "no such backend here", "field": "backend"}}, status_code=400)
            self.events.append("init")
            self.inits.append(body)
            ranks = [body["rank_offset"] + r for r in range(tp_size)]
            join = [body["backend"], body["master_address"], body["master_port"]]
            self.groups[body["group_name"]] = list(
                self.pool.map(lambda rank: WeightUpdateGroup(*join, rank, body["world_size"], body["group_name"]), ranks)
            )
            return {"success": True, "message": "joined"}

        @app.post("/update_weights_from_distributed")
        def update(body: dict):
            self.events.append("update")
            if sessions and not self.session_open:
                return JSONResponse({"success": False, "message": SESSIONLESS}, status_code=400)
            if refuse_update:
                return JSONResponse({"success": False, "message": "no such parameter here"}, status_code=400)
            groups = self.groups[body["group_name"]]
            list(self.pool.map(lambda r: self._receive(r, groups[r], body), range(tp_size)))
            self.versions.append(body["weight_version"])
            return {"success": True, "message": "updated", "weight_version": body["weight_version"]}

        @app.post("/update_weights_from_tensor")
        def commit(body: dict):
            # The update round's commit: no tensors (one empty entry per rank), the version.
            self.events.append("commit")
            if sessions and not self.session_open:
                return JSONResponse({"success": False, "message": SESSIONLESS}, status_code=400)
            assert len(body["serialized_named_tensors"]) == tp_size and body["load_format"] is None
            self.versions.append(body["weight_version"])
            return {"success": True, "message": "updated 0 tensors", "weight_version": body["weight_version"]}

        @app.post("/destroy_weights_update_group")
        def destroy(body: dict):
            self.events.append("destroy")
            for group in self.groups.pop(body["group_name"]):
                group.close()
            return {"success": True, "message": "destroyed"}

        if sessions:

            @app.post("/begin_weight_update")
            def begin(body: dict):
                self.events.append("begin")
                if self.session_open:
                    return JSONResponse({"success": False, "message": "a weight-update session is already open"}, 400)
                self.session_open = True
                return {"success": True, "message": "Success"}

            @app.post("/end_weight_update")
            def end(body: dict):
                self.events.append("end")
                self.session_open = False
                return {"success": True, "message": "Success"}

        self.server = AppServer(app)
        self.url = self.server.start()

    def _receive(self, rank: int, group: WeightUpdateGroup, body: dict) -> None:
        for name, dtype, shape in zip(body["names"], body["dtypes"], body["shapes"]):
            tensor = torch.empty(shape, dtype=DTYPES[dtype])
            group.broadcast(tensor, src=0)
            self.received[rank].append((name, tensor))

    def stop(self) -> None:
        self.server.stop()
        self.pool.shutdown()


@pytest.fixture
def stand_ins():
    made: list[StandIn] = []
    yield lambda **kwargs: made.append(StandIn(**kwargs)) or made[-1]
    for stand_in in made:
        stand_in.stop()


def weights() -> list[tuple[str, torch.Tensor]]:
    """Mixed dtypes and a non-contiguous tensor: the sender makes each one sendable."""
    return [
        ("a.weight", torch.arange(12, dtype=torch.float32).reshape(3, 4).t()),
        ("b.weight", torch.linspace(-1, 1, 7, dtype=torch.bfloat16)),
        ("c.bias", torch.tensor([3, 1, 4], dtype=torch.int64)),
    ]


def test_ranks_follow_each_engines_tp_size_and_every_rank_receives_every_tensor(stand_ins):
    wide, narrow = stand_ins(tp_size=2), stand_ins(tp_size=1)
    metrics = push_weights(weights(), [wide.url, narrow.url], 5, bucket_bytes=64, transport="gloo")

    assert [init["rank_offset"] for init in wide.inits + narrow.inits] == [1, 3]  # the sender is rank 0
    assert {init["world_size"] for init in wide.inits + narrow.inits} == {4}
    assert len({init["group_name"] for init in wide.inits + narrow.inits}) == 1
    for rank_received in wide.received + narrow.received:
        assert [name for name, _ in rank_received] == [name for name, _ in weights()]
        for (_, got), (_, sent) in zip(rank_received, weights()):
            assert got.dtype == sent.dtype and torch.equal(got, sent)
    # Buckets of 64 bytes: (a 48 + b 14), (c 24), then the round's commit with the version.
    assert wide.versions == narrow.versions == [None, None, "5"]
    assert metrics["transfer/buckets"] == 2
    assert metrics["transfer/bytes"] == 2 * (48 + 14 + 24)  # to each of the two engines
    assert wide.groups == narrow.groups == {}  # destroyed on every engine
    # One session per engine around it all, closed once the group is gone.
    assert wide.events == narrow.events == ["begin", "init", "update", "update", "destroy", "commit", "end"]
    assert not wide.session_open and not narrow.session_open


def test_every_push_uses_a_fresh_group(stand_ins):
    engine = stand_ins()
    push_weights(weights(), [engine.url], 1, 2**20, "gloo")
    push_weights(weights(), [engine.url], 2, 2**20, "gloo")
    names = [init["group_name"] for init in engine.inits]
    assert len(names) == 2 and names[0] != names[1]
    assert engine.versions == [None, "1", None, "2"]  # one bucket, then the commit, per push


def test_an_engine_without_tp_size_counts_as_one_rank(stand_ins):
    engine = stand_ins(server_info={"model_path": "x"})
    push_weights(weights(), [engine.url], 1, 2**20, "gloo")
    assert engine.inits[0]["world_size"] == 2


@pytest.mark.parametrize("tp_size", [0, "2", True])
def test_a_bad_tp_size_is_refused_naming_the_engine(stand_ins, tp_size):
    engine = stand_ins(server_info={"tp_size": tp_size})
    with pytest.raises(PushFailed, match=rf"{engine.url}/get_server_info: tp_size={re.escape(repr(tp_size))}"):
        push_weights(weights(), [engine.url], 1, 2**20, "gloo")
    assert engine.inits == []


def test_an_engine_refusing_to_join_fails_the_push_at_once(stand_ins):
    """Without watching the engines' answers the sender would wait out the rendezvous (minutes)."""
    engine = stand_ins(refuse_init=True)
    start = time.monotonic()
    with pytest.raises(PushFailed, match="no such backend here") as caught:
        push_weights(weights(), [engine.url], 1, 2**20, "gloo")
    assert f"{engine.url}/init_weights_update_group -> HTTP 400" in caught.value.errors[engine.url]
    assert time.monotonic() - start < 10


def test_a_refused_bucket_fails_the_push_at_once_and_still_closes_the_session(stand_ins):
    engine = stand_ins(refuse_update=True)
    start = time.monotonic()
    with pytest.raises(PushFailed, match="no such parameter here") as caught:
        push_weights(weights(), [engine.url], 1, 2**20, "gloo")
    assert f"{engine.url}/update_weights_from_distributed -> HTTP 400" in caught.value.errors[engine.url]
    assert time.monotonic() - start < 10, "the sender waited on the group instead of the answer"
    # Tried, then retried alone in the same session; never committed.
    assert engine.events == ["begin", "init", "update", "destroy", "init", "update", "destroy", "end"]
    assert not engine.session_open


def test_an_engine_without_sessions_is_pushed_to_without_one(stand_ins):
    older = stand_ins(sessions=False)
    push_weights(weights(), [older.url], 2, 2**20, "gloo")
    assert older.events == ["init", "update", "destroy", "commit"]
    assert [name for name, _ in older.received[0]] == [name for name, _ in weights()]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_nccl_without_cuda_says_which_setting_to_change():
    # The port-9 URL is never asked: the check comes before any engine is.
    with pytest.raises(RuntimeError, match=r"trainer\.weight_sync=nccl needs CUDA.*=gloo"):
        push_weights(weights(), ["http://127.0.0.1:9"], 1, 2**20, "nccl")


def test_an_unknown_transport_lists_every_known_one():
    with pytest.raises(ValueError, match=r"'ucx' is unknown; expected one of \['cuda_ipc', 'gloo', 'inline', 'nccl', 'shm'\]"):
        push_weights(weights(), ["http://127.0.0.1:9"], 1, 2**20, "ucx")
