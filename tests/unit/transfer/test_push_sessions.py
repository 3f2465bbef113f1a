"""Weight-update sessions around a tensor push (/update_weights_from_tensor), against stand-ins
over real HTTP that hold the session rule as SGLang 0.5.23 does: one session per server,
updates refused outside it."""

from __future__ import annotations

import pytest
import torch
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from loongsage.http_server import AppServer
from loongsage.transfer import PushFailed, push_weights

ALREADY_OPEN = "a weight-update session is already open; call end_weight_update() first"
SESSIONLESS = "update_weights_from_tensor must run between begin_weight_update() and end_weight_update()"


class StandIn:
    """`events`: the calls taken, in order. `open_session`: one is already open (left by a push
    that died); `sessions=False`: no session endpoints (404, SGLang before 0.5.23); `refuse`: the
    index of a bucket it refuses; `refuse_end` / `refuse_begin`: those calls answer 500. (The
    payloads are not unpacked: what they carry is the transports' tests' business.)"""

    def __init__(self, open_session=False, sessions=True, refuse=None, refuse_begin=False, refuse_end=False):
        self.events: list[str] = []
        self.versions: list[str] = []
        self.session_open = open_session
        app = FastAPI()

        @app.get("/get_server_info")
        def server_info():
            return {"tp_size": 1}  # one entry per bucket

        @app.post("/update_weights_from_tensor")
        def update(body: dict):
            if sessions and not self.session_open:
                self.events.append("update refused")
                return JSONResponse({"success": False, "message": SESSIONLESS}, status_code=400)
            if len(self.versions) == refuse:
                self.events.append("update refused")
                return JSONResponse({"success": False, "message": f"bucket {refuse} refused"}, status_code=400)
            self.events.append("update")
            self.versions.append(body["weight_version"])
            return {"success": True, "message": "Success"}

        if sessions:

            @app.post("/begin_weight_update")
            def begin(body: dict):
                if refuse_begin:
                    return JSONResponse({"success": False, "message": "begin broke"}, status_code=500)
                if self.session_open:
                    self.events.append("begin refused")
                    return JSONResponse({"success": False, "message": ALREADY_OPEN}, status_code=400)
                assert body == {"selector": "all"}
                self.events.append("begin")
                self.session_open = True
                return {"success": True, "message": "Success"}

            @app.post("/end_weight_update")
            def end(body: dict):
                if refuse_end:
                    return JSONResponse({"success": False, "message": "end broke"}, status_code=500)
                self.events.append("end")
                self.session_open = False
                return {"success": True, "message": "Success"}

        self.server = AppServer(app)
        self.url = self.server.start()


@pytest.fixture
def stand_ins():
    made: list[StandIn] = []
    yield lambda **kwargs: made.append(StandIn(**kwargs)) or made[-1]
    for stand_in in made:
        stand_in.server.stop()


def weights() -> list[tuple[str, torch.Tensor]]:
    return [(f"layer{i}.weight", torch.full((4,), float(i))) for i in range(3)]


def push(urls: list[str]) -> dict:
    return push_weights(weights(), urls, 3, bucket_bytes=16, transport="inline")  # one tensor a bucket


def test_every_engine_gets_one_session_around_all_its_buckets(stand_ins):
    engines = [stand_ins(), stand_ins()]
    assert push([e.url for e in engines])["transfer/buckets"] == 3
    for engine in engines:
        # Three buckets, then the round's commit: no tensors, the version.
        assert engine.events == ["begin", "update", "update", "update", "update", "end"]
        assert engine.versions == [None, None, None, "3"] and not engine.session_open


def test_a_refused_bucket_still_closes_every_session(stand_ins):
    good, refusing = stand_ins(), stand_ins(refuse=1)
    with pytest.raises(PushFailed, match="bucket 1 refused") as caught:
        push([good.url, refusing.url])
    assert list(caught.value.errors) == [refusing.url]
    assert f"{refusing.url}/update_weights_from_tensor -> HTTP 400" in caught.value.errors[refusing.url]
    assert good.events == ["begin", "update", "update", "update", "update", "end"]  # the others go on, and commit
    assert good.versions == [None, None, None, "3"]
    # Then its retry alone in the same session, refused at once (this stand-in refuses its second
    # update ever); never committed, its session closes and it keeps its old weights.
    assert refusing.events == ["begin", "update", "update refused", "update refused", "end"]
    assert refusing.versions == [None]


def test_a_session_left_open_is_closed_and_opened_again(stand_ins):
    stale = stand_ins(open_session=True)
    push([stale.url])
    assert stale.events == ["begin refused", "end", "begin", "update", "update", "update", "update", "end"]


def test_an_engine_without_sessions_is_pushed_to_without_one(stand_ins):
    older = stand_ins(sessions=False)
    push([older.url])
    assert older.events == ["update"] * 4  # three buckets and the commit


def test_an_engine_that_cannot_open_one_is_left_out_and_the_others_get_the_weights(stand_ins):
    first, broken = stand_ins(), stand_ins(refuse_begin=True)
    with pytest.raises(PushFailed, match="begin broke") as caught:
        push([first.url, broken.url])
    assert list(caught.value.errors) == [broken.url]
    # Nothing is sent to the broken one; the healthy one gets the weights.
    assert first.events == ["begin", "update", "update", "update", "update", "end"] and broken.events == []


def test_a_session_that_does_not_close_fails_a_push_that_went_through(stand_ins):
    """SGLang finalizes the loaded weights at the end of the session: the push did not finish."""
    engine = stand_ins(refuse_end=True)
    with pytest.raises(PushFailed, match="end broke") as caught:
        push([engine.url])
    assert f"{engine.url}/end_weight_update -> HTTP 500" in caught.value.errors[engine.url]
    assert engine.events == ["begin", "update", "update", "update", "update"]
