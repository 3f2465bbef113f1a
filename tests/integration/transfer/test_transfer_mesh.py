"""TransferMesh's sender against real embedded engines over real HTTP: a plan's routes run
together over their transports; pipelining changes nothing in what arrives; a receiver that
fails mid-push keeps its old weights, is retried once, and is reported without holding back
the others."""

from __future__ import annotations

from contextlib import contextmanager

import httpx
import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from loongsage.http_server import AppServer
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.transfer import PushFailed, push_weights
from loongsage.transfer.endpoints import SOURCE
from loongsage.transfer.relay import Relay, RelayServer
from loongsage.transfer.rounds import execute_plan
from loongsage.transfer.routes import Endpoint, Plan, Route
from tests.integration.inference.embedded.engine_support import running_engine

SMALL_BUCKETS = 64 * 1024  # several buckets for the tiny model, so a push can fail in the middle


def trained_weights(model_path: str) -> list[tuple[str, torch.Tensor]]:
    """The model's weights moved by a fixed amount, as a training step would move them."""
    generator = torch.Generator().manual_seed(0)
    return [(name, t + 0.01 * torch.randn(t.shape, generator=generator)) for name, t in read_safetensors(model_path)]


def parameters(server) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in server.engine.model.named_parameters()}


class FailingProxy:
    """Forwards every call to `target`; its `fail_at`-th /update_weights_from_tensor answers 500
    instead, and with `forever` every later one too."""

    def __init__(self, target: str, fail_at: int, forever: bool):
        self.updates = 0
        self.refused = 0
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def forward(path: str, request: Request):
            if path == "update_weights_from_tensor":
                self.updates += 1
                if self.updates == fail_at or (forever and self.updates > fail_at):
                    self.refused += 1
                    return JSONResponse({"error": {"message": "injected: the link dropped"}}, status_code=500)
            async with httpx.AsyncClient(base_url=target, timeout=120) as client:
                answer = await client.request(
                    request.method, f"/{path}", content=await request.body(), headers={"content-type": "application/json"}
                )
            return Response(answer.content, answer.status_code, media_type="application/json")

        self.server = AppServer(app)
        self.url = self.server.start()


@pytest.fixture
def proxies():
    made: list[FailingProxy] = []
    yield lambda *args: made.append(FailingProxy(*args)) or made[-1]
    for proxy in made:
        proxy.server.stop()


def two_route_plan(shm_url: str, gloo_url: str) -> Plan:
    endpoints = [
        Endpoint(SOURCE, "source", "here"),
        Endpoint("engine/0", "engine", "here", url=shm_url),
        Endpoint("engine/1", "engine", "here", url=gloo_url),
    ]
    routes = [Route(SOURCE, "engine/0", "shm", "host_shm"), Route(SOURCE, "engine/1", "gloo", "tcp")]
    return Plan({e.name: e for e in endpoints}, routes)


def test_a_plans_routes_run_together_and_both_engines_serve_the_pushed_weights(tiny_model_path):
    named = trained_weights(tiny_model_path)
    with running_engine(tiny_model_path) as first, running_engine(tiny_model_path) as second:
        plan = two_route_plan(first.base_url, second.base_url)
        plan.check()
        report = execute_plan(plan, SOURCE, named, [first.base_url, second.base_url], 7, "127.0.0.1", bucket_mb=1)
        assert report.failed == {} and report.updated == [first.base_url, second.base_url]
        model_bytes = sum(t.numel() * t.element_size() for _, t in named)
        metrics = report.metrics
        assert metrics["transfer/bytes/shm"] == metrics["transfer/bytes/gloo"] == model_bytes
        assert metrics["transfer/bytes"] == 2 * model_bytes and metrics["transfer/gbps"] > 0
        for server in (first, second):
            assert EngineClient(server.base_url).get_weight_version() == "7"
        assert all(torch.equal(a, b) for a, b in zip(parameters(first).values(), parameters(second).values()))
        # A resync of one engine runs its route only.
        again = execute_plan(plan, SOURCE, named, [second.base_url], 8, "127.0.0.1", bucket_mb=1)
        assert set(again.metrics) >= {"transfer/bytes/gloo"} and "transfer/bytes/shm" not in again.metrics
        assert [EngineClient(s.base_url).get_weight_version() for s in (first, second)] == ["7", "8"]


@pytest.mark.parametrize("transport", ["shm", "gloo"])
def test_pipelined_and_unpipelined_pushes_leave_identical_weights(tiny_model_path, transport):
    named = trained_weights(tiny_model_path)
    with running_engine(tiny_model_path) as piped, running_engine(tiny_model_path) as plain:
        push_weights(named, [piped.base_url], 1, SMALL_BUCKETS, transport, pipelined=True)
        push_weights(named, [plain.base_url], 1, SMALL_BUCKETS, transport, pipelined=False)
        got, expected = parameters(piped), parameters(plain)
        assert got.keys() == expected.keys()
        assert all(torch.equal(got[name], expected[name]) for name in got)
        with running_engine(tiny_model_path) as untouched:  # and the push did change them
            assert any(not torch.equal(got[n], t) for n, t in parameters(untouched).items())


def test_a_receiver_failing_mid_push_keeps_its_old_weights_is_retried_and_the_others_go_on(tiny_model_path, proxies):
    named = trained_weights(tiny_model_path)
    with (
        running_engine(tiny_model_path) as healthy,
        running_engine(tiny_model_path) as flaky,
        running_engine(tiny_model_path) as broken,
    ):
        flaky_proxy = proxies(flaky.base_url, 3, False)  # its third bucket fails once: the retry succeeds
        broken_proxy = proxies(broken.base_url, 3, True)  # from its third bucket on, every time
        before = parameters(broken)
        urls = [healthy.base_url, flaky_proxy.url, broken_proxy.url]
        with pytest.raises(PushFailed) as caught:
            push_weights(named, urls, 5, SMALL_BUCKETS, "inline")
        assert list(caught.value.errors) == [broken_proxy.url]
        assert "injected: the link dropped" in str(caught.value)
        assert flaky_proxy.refused == 1 and broken_proxy.refused == 2  # each tried, then retried alone once
        assert EngineClient(healthy.base_url).get_weight_version() == "5"
        assert EngineClient(flaky.base_url).get_weight_version() == "5"
        # The broken one got two buckets each time, staged, never committed: bit-identical, old version.
        assert EngineClient(broken.base_url).get_weight_version() == "default"
        after = parameters(broken)
        assert all(torch.equal(before[name], after[name]) for name in before)
        assert EngineClient(broken.base_url).get_server_info()["staged_weight_tensors"] == 0


def relayed_plan(relay_url: str, engine_urls: list[str], into_relay: str) -> Plan:
    """The engines' host has no source: the weights cross to its relay once (over `into_relay`)
    and fan out there over shm."""
    endpoints = [
        Endpoint(SOURCE, "source", "trainer-host"),
        Endpoint("relay/engine-host/0", "relay", "engine-host", url=relay_url),
        *[Endpoint(f"engine/{i}", "engine", "engine-host", url=url) for i, url in enumerate(engine_urls)],
    ]
    routes = [
        Route(SOURCE, "relay/engine-host/0", into_relay, "tcp"),
        *[Route("relay/engine-host/0", f"engine/{i}", "shm", "host_shm") for i in range(len(engine_urls))],
    ]
    plan = Plan({e.name: e for e in endpoints}, routes)
    plan.check()
    return plan


@contextmanager
def running_relay(engine_urls: list[str]):
    server = RelayServer(Relay({"shm": engine_urls}, "127.0.0.1"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("into_relay", ["gloo", "inline"])
def test_a_relay_takes_the_weights_once_and_every_engine_behind_it_serves_them(tiny_model_path, into_relay):
    named = trained_weights(tiny_model_path)
    with running_engine(tiny_model_path) as first, running_engine(tiny_model_path) as second:
        urls = [first.base_url, second.base_url]
        with running_relay(urls) as relay:
            plan = relayed_plan(relay.base_url, urls, into_relay)
            report = execute_plan(plan, SOURCE, named, urls, 3, "127.0.0.1", bucket_mb=1)
        assert report.failed == {} and report.updated == urls
        model_bytes = sum(t.numel() * t.element_size() for _, t in named)
        assert report.metrics[f"transfer/bytes/{into_relay}"] == model_bytes  # one copy crossed, for two engines
        assert [EngineClient(url).get_weight_version() for url in urls] == ["3", "3"]
        with running_engine(tiny_model_path) as direct:
            push_weights(named, [direct.base_url], 3, SMALL_BUCKETS, "shm")
            expected = parameters(direct)
        for server in (first, second):
            got = parameters(server)
            assert all(torch.equal(got[name], expected[name]) for name in expected)


def test_an_engine_failing_behind_a_relay_is_reported_and_keeps_its_weights_the_other_commits(tiny_model_path, proxies):
    named = trained_weights(tiny_model_path)
    with running_engine(tiny_model_path) as healthy, running_engine(tiny_model_path) as broken:
        broken_proxy = proxies(broken.base_url, 2, True)
        before = parameters(broken)
        with running_relay([healthy.base_url, broken_proxy.url]) as relay:
            plan = relayed_plan(relay.base_url, [healthy.base_url, broken_proxy.url], "gloo")
            report = execute_plan(plan, SOURCE, named, [healthy.base_url, broken_proxy.url], 4, "127.0.0.1", bucket_mb=1)
        assert report.updated == [healthy.base_url]
        assert list(report.failed) == [broken_proxy.url]
        assert f"through relay {relay.base_url}" in report.failed[broken_proxy.url]
        assert "injected: the link dropped" in report.failed[broken_proxy.url]
        assert report.metrics["transfer/retries"] == 0  # the relay itself took every bucket
        assert EngineClient(healthy.base_url).get_weight_version() == "4"
        after = parameters(broken)
        assert all(torch.equal(before[name], after[name]) for name in before)


def test_two_relays_each_bring_one_share_and_every_engine_takes_both_then_commits_once(tiny_model_path):
    """A GPU host's layout on CPU: a relay per NIC, each taking every other bucket, both feeding
    every engine of the host at once; the round commits each engine once both are done."""
    named = trained_weights(tiny_model_path)
    with running_engine(tiny_model_path) as first, running_engine(tiny_model_path) as second:
        urls = [first.base_url, second.base_url]
        with running_relay(urls) as relay0, running_relay(urls) as relay1:
            relays = [relay0.base_url, relay1.base_url]
            endpoints = [
                Endpoint(SOURCE, "source", "trainer-host"),
                *[Endpoint(f"relay/engine-host/{s}", "relay", "engine-host", url=relays[s]) for s in range(2)],
                *[Endpoint(f"engine/{i}", "engine", "engine-host", url=url) for i, url in enumerate(urls)],
            ]
            routes = [Route(SOURCE, f"relay/engine-host/{s}", "gloo", "tcp", s, 2) for s in range(2)] + [
                Route(f"relay/engine-host/{s}", f"engine/{i}", "shm", "host_shm", s, 2) for s in range(2) for i in range(2)
            ]
            plan = Plan({e.name: e for e in endpoints}, routes)
            plan.check()
            report = execute_plan(plan, SOURCE, named, urls, 6, "127.0.0.1", bucket_mb=SMALL_BUCKETS / 2**20)
        assert report.failed == {} and report.updated == urls
        model_bytes = sum(t.numel() * t.element_size() for _, t in named)
        assert report.metrics["transfer/bytes/gloo"] == model_bytes  # the two shares make one copy
        assert report.metrics["transfer/buckets"] > 2
        assert [EngineClient(url).get_weight_version() for url in urls] == ["6", "6"]
        with running_engine(tiny_model_path) as direct:
            push_weights(named, [direct.base_url], 6, SMALL_BUCKETS, "shm")
            expected = parameters(direct)
        for server in (first, second):
            got = parameters(server)
            assert all(torch.equal(got[name], expected[name]) for name in expected)
