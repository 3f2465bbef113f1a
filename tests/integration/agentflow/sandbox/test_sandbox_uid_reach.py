"""The local backend, run as root, gives each sandbox a uid of its own only where that uid can
run the framework's Python; elsewhere (a venv or pyenv under a root-only home) its commands
run as the framework's user, it says why once, and it promises no more than it keeps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from loongsage.agentflow.sandbox import SandboxLimits, create_sandbox
from loongsage.agentflow.sandbox.uid_reach import sandbox_uid_blocker

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids are given only by root")

LIMITS = SandboxLimits(timeout_s=30, network=True)
# Run by a Python whose installation a sandbox uid cannot reach.
REPORT = """
import json, logging
from loongsage.agentflow.sandbox import SandboxLimits, create_sandbox
logging.basicConfig(format="%(message)s")
with create_sandbox({"t/test_a.py": "def test_a():\\n    pass\\n"}, backend="local",
                    limits=SandboxLimits(timeout_s=60, network=True)) as sb:
    run = sb.exec("python -m pytest -q -p no:cacheprovider t", env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    print(json.dumps({"uid": sb.uid, "hides": sb.hides_other_sandboxes, "read_only": sb.read_only_system,
                      "caps": sb.caps_processes, "kills_escaped": sb.kills_escaped_processes,
                      "exit": run.exit_code, "out": run.stdout + run.stderr}))
"""


@pytest.fixture
def private_venv():
    """A venv (seeing the framework's packages) inside a directory only root can enter, as
    under /root; removed afterwards."""
    private = Path(tempfile.mkdtemp(prefix="private-home-"))  # mode 0700
    try:
        venv = private / "venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True, timeout=120
        )
        yield private, venv / "bin" / "python"
    finally:
        shutil.rmtree(private)


def test_python_under_a_root_only_directory_runs_in_local_sandboxes_as_the_framework_user(private_venv):
    private, python = private_venv
    done = subprocess.run([str(python), "-c", REPORT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["exit"] == 0 and "1 passed" in report["out"], report["out"]
    assert report["uid"] is None  # no uid of its own: it could not have run that Python
    # The promises that need a uid of its own are not made.
    assert not (report["hides"] or report["read_only"] or report["caps"] or report["kills_escaped"])
    warning = next(line for line in done.stderr.splitlines() if "runs commands as this process's user" in line)
    assert f"{private} is mode 0700, not searchable by other users" in warning
    assert "apt-get install bubblewrap" in warning


def test_local_sandboxes_get_a_uid_of_their_own_where_it_can_run_python():
    if sandbox_uid_blocker() is not None:
        pytest.skip(f"here {sandbox_uid_blocker()}")
    with create_sandbox({}, backend="local", limits=LIMITS) as sb:
        result = sb.exec("id -u; python -c 'import pytest'")
        assert sb.uid is not None and result.stdout == f"{sb.uid}\n", result.stderr
        assert sb.hides_other_sandboxes and sb.read_only_system and sb.caps_processes and sb.kills_escaped_processes


def test_local_sandboxes_promise_isolation_exactly_when_they_have_a_uid_of_their_own():
    with create_sandbox({}, backend="local", limits=LIMITS) as sb:
        own_uid = sandbox_uid_blocker() is None
        assert (sb.uid is not None) == own_uid
        result = sb.exec("id -u")
        assert result.stdout == f"{sb.uid if own_uid else os.geteuid()}\n"
        assert [sb.hides_other_sandboxes, sb.read_only_system, sb.kills_escaped_processes] == [own_uid] * 3
