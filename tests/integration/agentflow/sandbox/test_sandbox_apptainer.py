"""The apptainer backend for real, where the runtime exists: set LOONGSAGE_TEST_APPTAINER_IMAGE
to an image with bash and python3 (a .sif file, or docker://python:3.11-slim with network)."""

from __future__ import annotations

import os
import shutil
import socket

import pytest

from loongsage.agentflow.sandbox import SandboxLimits, create_sandbox

IMAGE = os.environ.get("LOONGSAGE_TEST_APPTAINER_IMAGE")
pytestmark = [
    pytest.mark.skipif(shutil.which("apptainer") is None, reason="apptainer is not installed here"),
    pytest.mark.skipif(not IMAGE, reason="LOONGSAGE_TEST_APPTAINER_IMAGE names no image to run"),
]
LIMITS = SandboxLimits(timeout_s=120, max_file_mb=2)


def test_commands_run_in_the_image_on_the_tree_and_diff_sees_their_edits(monkeypatch):
    monkeypatch.setenv("LOONGSAGE_HOST_SECRET", "leaked")
    with create_sandbox({"a.py": "x = 1\n"}, backend="apptainer", limits=LIMITS, image=IMAGE, workdir="/testbed") as sb:
        result = sb.exec("pwd && python3 a.py && echo 'y = 2' >> a.py && echo \"[${LOONGSAGE_HOST_SECRET:-}]\"")
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines()[0] == "/testbed" and result.stdout.endswith("[]\n")
        assert "+y = 2" in sb.diff()


def test_network_is_denied_and_limits_hold():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        with create_sandbox({}, backend="apptainer", limits=LIMITS, image=IMAGE) as sb:
            denied = sb.exec(f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\"")
            big = sb.exec("head -c 50000000 /dev/zero > big.bin")
            slow = sb.exec("sleep 30", timeout_s=2)
            assert denied.exit_code != 0
            assert big.exit_code != 0 and (sb.root / "big.bin").stat().st_size == 2 << 20
            assert slow.timed_out and slow.exit_code is None
    finally:
        listener.close()
