"""EngineClient.get_weight_version against servers over real HTTP that report the version where
each SGLang generation does: /model_info (0.5.23, which has no /get_weight_version), the
deprecated /get_model_info, or only /get_weight_version (older servers)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from loongsage.http_server import AppServer
from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.engine_pool import _weight_version
from loongsage.inference.resumable import UNVERSIONED


def serve(routes: dict) -> tuple[AppServer, list[str]]:
    """A server answering GET `path` with `routes[path]` (a dict, or an int: that status); every
    other path is FastAPI's 404. Returns it and the paths asked, in order."""
    app, asked = FastAPI(), []
    for path, answer in routes.items():

        def handler(path=path, answer=answer):
            asked.append(path)
            return answer if isinstance(answer, dict) else JSONResponse({"error": {"message": "broken"}}, status_code=answer)

        app.get(path)(handler)
    server = AppServer(app)
    server.start()
    return server, asked


@pytest.fixture
def client_for():
    made = []

    def make(routes: dict) -> tuple[EngineClient, list[str]]:
        server, asked = serve(routes)
        client = EngineClient(server.base_url)
        made.append((server, client))
        return client, asked

    yield make
    for server, client in made:
        client.close()
        server.stop()


@pytest.mark.parametrize(
    ("routes", "expected", "asked"),
    [
        # SGLang 0.5.23: /model_info, nothing else asked.
        ({"/model_info": {"weight_version": "7"}, "/get_weight_version": {"weight_version": "old"}}, "7", ["/model_info"]),
        # Only the deprecated name.
        ({"/get_model_info": {"weight_version": "6"}}, "6", ["/get_model_info"]),
        # Model info without a version, and the old endpoint.
        (
            {"/get_model_info": {"model_path": "m"}, "/get_weight_version": {"weight_version": "5"}},
            "5",
            ["/get_model_info", "/get_weight_version"],
        ),
    ],
)
def test_the_version_comes_from_where_the_server_reports_it(client_for, routes, expected, asked):
    client, seen = client_for(routes)
    assert client.get_weight_version() == expected
    assert seen == asked


def test_a_server_reporting_no_version_is_a_404_and_the_pool_reads_it_as_unversioned(client_for):
    client, _ = client_for({"/get_model_info": {"model_path": "m"}})
    with pytest.raises(EngineError) as caught:
        client.get_weight_version()
    assert caught.value.status == 404 and caught.value.url.endswith("/get_weight_version")
    assert _weight_version(client) == UNVERSIONED


def test_a_failing_model_info_is_raised_not_skipped(client_for):
    """Only a 404 means "not this server's endpoint"; a 500 is the server's failure."""
    client, seen = client_for({"/model_info": 500, "/get_weight_version": {"weight_version": "3"}})
    with pytest.raises(EngineError) as caught:
        client.get_weight_version()
    assert caught.value.status == 500 and seen == ["/model_info"]
