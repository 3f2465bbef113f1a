"""The server command as the actor runs it."""

from __future__ import annotations

import sys

from loongsage.inference.sglang.actor import server_command


def test_python_means_this_environments_interpreter():
    # A Ray worker's PATH may lead to another Python than the run's (a venv never activated).
    assert server_command(("python", "-m", "sglang.launch_server")) == [sys.executable, "-m", "sglang.launch_server"]
    assert server_command(("python3", "-m", "x")) == [sys.executable, "-m", "x"]


def test_any_other_command_runs_as_given():
    assert server_command(("/opt/sglang/bin/python", "-m", "sglang.launch_server")) == [
        "/opt/sglang/bin/python",
        "-m",
        "sglang.launch_server",
    ]
