"""Every sandbox backend is a Sandbox subclass that create_sandbox constructs as
`cls(snapshot, limits, **options)` and attach_sandbox as `cls(None, limits, attach=handle,
**options)`, whose `backend` is the name it is registered under (handles carry that name)."""

from __future__ import annotations

import pytest

from loongsage.agentflow.sandbox import BACKENDS, Sandbox
from tests.plugin_contracts.call_shapes import ANY, accepts, method_problems

AGENT_CALLS = {"exec": (ANY,), "read_file": (ANY,), "write_file": (ANY, ANY), "diff": (), "handle": (), "destroy": ()}


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_backend_is_a_sandbox_built_and_attached_the_way_the_factory_does(name):
    cls = BACKENDS[name]
    assert isinstance(cls, type) and issubclass(cls, Sandbox)
    assert accepts(cls, ANY, ANY) and accepts(cls, None, ANY, attach=ANY)
    assert method_problems(cls, AGENT_CALLS) == []


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_backend_names_itself_by_its_registry_name(name):
    # Sandbox.handle() writes `backend`, attach_sandbox looks it up: a mismatch attaches the wrong kind.
    assert BACKENDS[name].backend == name
