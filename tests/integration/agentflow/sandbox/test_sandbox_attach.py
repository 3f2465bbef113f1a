"""A handle on a sandbox from another process: commands run in the same tree, under the
same confinement, and the owner keeps the tree's lifetime."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loongsage.agentflow.sandbox import SandboxError, attach_sandbox, available_backends, create_sandbox

ATTACH_AND_RUN = """
import json, sys
from loongsage.agentflow.sandbox import attach_sandbox
sandbox = attach_sandbox(json.loads(sys.argv[1]))
result = sandbox.exec("echo fixed > fix.txt && cat mod.py && id -u")
print(json.dumps({"exit": result.exit_code, "stdout": result.stdout}))
"""


@pytest.mark.parametrize("backend", [b for b in ("bwrap", "local") if b in available_backends()])
def test_another_process_runs_commands_in_the_owners_tree(backend):
    with create_sandbox({"mod.py": "x = 1\n"}, backend=backend) as owner:
        handle = owner.handle()
        out = subprocess.run(
            [sys.executable, "-c", ATTACH_AND_RUN, json.dumps(handle)], capture_output=True, text=True, timeout=60, check=True
        )
        result = json.loads(out.stdout)
        assert result["exit"] == 0
        lines = result["stdout"].splitlines()
        assert lines[0] == "x = 1"
        if owner.uid is not None:  # as root: the same unprivileged uid as the owner's commands
            assert int(lines[1]) == owner.uid
        assert owner.read_file("fix.txt") == "fixed\n"
        assert "+fixed" in owner.diff()
        # A handle's destroy() leaves the owner's tree alone.
        attached = attach_sandbox(handle)
        attached.destroy()
        assert owner.exec("cat fix.txt").stdout == "fixed\n"
    with pytest.raises(SandboxError, match="no longer exists"):
        attach_sandbox(handle)


def test_a_bad_handle_is_refused_with_the_reason():
    with pytest.raises(SandboxError, match="bad sandbox handle"):
        attach_sandbox({"backend": "bwrap"})
