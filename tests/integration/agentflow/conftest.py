"""The router and agent tests' servers: a stand-in engine (tests/standins/engine.py) and the
router in front of it, one each per module.

A module sets them up by overriding `engine_settings` (StandinEngine options) or
`router_settings` (RouterConfig fields), puts its router in front of another engine by
overriding `engine_url`, and starts each test with nothing queued or recorded with
`pytestmark = pytest.mark.usefixtures("fresh_script")`.
"""

from __future__ import annotations

import pytest

from tests.integration.agentflow.router_support import start_router
from tests.standins.engine import StandinEngine

SCRIPTED_VERSION = "3"  # the weight version the stand-in stamps on its answers


@pytest.fixture(scope="module")
def engine_settings() -> dict:
    return {}


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {}


@pytest.fixture(scope="module")
def engine(tokenizer, engine_settings):
    standin = StandinEngine(tokenizer, version=SCRIPTED_VERSION, **engine_settings)
    yield standin
    standin.stop()


@pytest.fixture(scope="module")
def engine_url(engine) -> str:
    return engine.url


@pytest.fixture(scope="module")
def router(engine_url, tiny_model_path, tokenizer, router_settings):
    server = start_router(engine_url, tiny_model_path, tokenizer, **router_settings)
    yield server
    server.stop()


@pytest.fixture
def fresh_script(engine):
    engine.reset()
