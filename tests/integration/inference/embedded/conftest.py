"""The embedded engine tests' client: one per module, to the engine the module serves as `server`
(a module that needs another client overrides it)."""

from __future__ import annotations

import pytest

from loongsage.inference.client import EngineClient


@pytest.fixture(scope="module")
def client(server):
    c = EngineClient(server.base_url, timeout=60)
    yield c
    c.close()
