"""A stop ends every episode's sandbox, including one whose episode was still starting."""

from __future__ import annotations

import pytest

from loongsage.agentflow.sandbox import SandboxError, create_sandbox
from loongsage.controller.live_sandboxes import LiveSandboxes


def _alive(sandbox) -> bool:
    try:
        return sandbox.exec("true").exit_code == 0
    except SandboxError:
        return False


def test_close_destroys_live_sandboxes_and_refuses_later_ones():
    live = LiveSandboxes()
    with create_sandbox({"a.py": "x = 1\n"}, backend="local") as running, create_sandbox({}, backend="local") as done:
        with live.holding(done):
            pass
        with live.holding(running):
            live.close()
            assert not _alive(running)
        assert _alive(done)  # it left before the stop: not the registry's to end
        with create_sandbox({}, backend="local") as late:  # made before the stop, registered after
            with pytest.raises(SandboxError, match="stopping"), live.holding(late):
                pytest.fail("a closed registry admitted a sandbox")
            assert not _alive(late)
