"""ServerProcess with real subprocesses: a stand-in server, commands that fail, a process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loongsage.inference.sglang.ports import free_ports
from loongsage.inference.sglang.process import ServerProcess, ServerStartError
from tests.standins import engine as standin_engine

STANDIN = standin_engine.__file__  # run as a script: a model-free server process


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie still answers kill(pid, 0))."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def group_members(group: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def wait_until(predicate, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def port() -> int:
    return free_ports("127.0.0.1", 1)[0]


def _process(argv: list[str], tmp_path: Path) -> ServerProcess:
    return ServerProcess(argv, os.environ, tmp_path / "logs" / "engine-7.log", "sglang engine 7")


def test_serves_then_stops_with_its_group(tmp_path, port):
    process = _process([sys.executable, STANDIN, "--host", "127.0.0.1", "--port", str(port)], tmp_path)
    process.start(f"http://127.0.0.1:{port}", timeout_s=60)
    assert process.alive()
    log = process.log_path.read_text()
    assert f"standin serving on 127.0.0.1:{port}" in log
    assert "sglang engine 7:" in log and STANDIN in log  # the header names the command
    process.stop()
    assert not process.alive() and not running(process.pid) and group_members(process.pid) == []
    process.stop()  # idempotent


def test_exit_before_serving_names_engine_command_exit_code_and_output(tmp_path, port):
    argv = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    with pytest.raises(ServerStartError) as error:
        _process(argv, tmp_path).start(f"http://127.0.0.1:{port}", timeout_s=60)
    message = str(error.value)
    assert "sglang engine 7 exited with code 3" in message
    assert "boom" in message and "sys.exit(3)" in message and "engine-7.log" in message


def test_no_answer_in_time_names_the_timeout_and_the_log_tail_and_leaves_nothing_behind(tmp_path, port):
    # Its words are joined as it runs: they reach the message only through the log's tail, not
    # through the command line the message also quotes.
    script = "import time; print('still' + ' loading weights', flush=True); time.sleep(600)"
    process = _process([sys.executable, "-c", script], tmp_path)
    with pytest.raises(ServerStartError, match=r"sglang engine 7 did not answer .*/health_generate within 1.5 s") as error:
        process.start(f"http://127.0.0.1:{port}", timeout_s=1.5)
    message = str(error.value)
    assert "rollout.sglang.startup_timeout_s" in message
    assert "still loading weights" in message and "engine-7.log" in message
    assert not running(process.pid)


def test_stop_kills_what_ignores_sigterm_and_its_children(tmp_path):
    # The leader ignores SIGTERM and has a child that does too, as a wedged server might. (The
    # child's words are printed apart: the log's header holds the command line itself.)
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        'signal.signal(signal.SIGTERM, signal.SIG_IGN); print("child", "up", flush=True); time.sleep(600)\'])\n'
        "time.sleep(600)\n"
    )
    process = _process([sys.executable, "-c", script], tmp_path)
    process.launch()
    assert wait_until(lambda: "child up" in process.log_path.read_text())
    members = group_members(process.pid)
    assert len(members) == 2
    process.stop(grace_s=0.5)
    assert process.returncode == -signal.SIGKILL
    assert wait_until(lambda: not any(running(pid) for pid in members))


def test_the_server_dies_with_the_process_that_started_it(tmp_path, port):
    """SIGKILL of the starter (as ray.kill does to an actor) takes the server with it."""
    starter = (
        "import os, sys, time\n"
        "from loongsage.inference.sglang.process import ServerProcess\n"
        f"p = ServerProcess([sys.executable, {STANDIN!r}, '--port', '{port}'], os.environ, {str(tmp_path / 'e.log')!r}, 'e')\n"
        f"p.start('http://127.0.0.1:{port}', 60)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    assert running(server_pid)
    parent.kill()
    parent.wait()
    assert wait_until(lambda: not running(server_pid))
