"""The escape battery: runaway or hostile commands are stopped or denied on every backend
that promises it, nothing else is affected, and the sandbox still works afterwards."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from loongsage.agentflow.sandbox import SandboxError, SandboxLimits, create_sandbox
from tests.integration.agentflow.sandbox.sandbox_support import backend_params, processes_of_uid, processes_running, wait_until

LIMITS = SandboxLimits(timeout_s=20, cpu_s=2, memory_mb=512, max_processes=32, max_file_mb=2, max_output_bytes=1000)


@pytest.fixture(params=backend_params())
def backend(request) -> str:
    return request.param


@pytest.fixture
def sandbox(backend):
    with create_sandbox({"app.py": "print('ok')\n"}, backend=backend, limits=LIMITS) as sb:
        yield sb


def assert_still_works(sandbox) -> None:
    result = sandbox.exec("echo alive && cat app.py", timeout_s=10)
    assert (result.exit_code, result.stdout) == (0, "alive\nprint('ok')\n"), result.stderr


def test_fork_bomb_is_capped_and_stopped_and_the_host_still_forks(sandbox, backend):
    if not sandbox.caps_processes:  # as root without a uid of its own: only the timeout would stop it
        pytest.skip(f"the {backend} backend does not promise to cap processes here")
    peak = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak.append(processes_of_uid(sandbox.uid))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch) if sandbox.uid is not None else None
    if watcher:
        watcher.start()
    try:
        result = sandbox.exec(":(){ :|:& };: ; sleep 60", timeout_s=3)
    finally:
        stop.set()
        if watcher:
            watcher.join()
    assert result.timed_out and result.exit_code is None
    assert result.duration_s < 3 + 5
    if sandbox.uid is not None:
        assert max(peak) <= LIMITS.max_processes  # the kernel refused forks past the limit
        assert max(peak) >= 8  # and the bomb did go off
        assert wait_until(lambda: processes_of_uid(sandbox.uid) == 0)
    assert subprocess.run(["true"]).returncode == 0
    assert_still_works(sandbox)


def test_infinite_loop_is_killed_at_the_timeout(sandbox):
    result = sandbox.exec("echo started; while :; do :; done", timeout_s=1)
    assert result.timed_out and result.exit_code is None and result.stdout == "started\n"
    assert 1 <= result.duration_s < 1 + 3
    assert_still_works(sandbox)


def test_cpu_burner_is_killed_by_the_cpu_limit_before_the_timeout(backend):
    with create_sandbox(
        {"app.py": "print('ok')\n"}, backend=backend, limits=dataclasses.replace(LIMITS, cpu_s=1, timeout_s=30)
    ) as sandbox:
        result = sandbox.exec("while :; do :; done")
        assert not result.timed_out
        assert result.exit_code in (128 + 9, 128 + 24)  # SIGKILL or SIGXCPU from RLIMIT_CPU
        assert result.duration_s < 20
        assert_still_works(sandbox)


def test_a_gigabyte_of_output_is_capped_without_blocking(sandbox):
    result = sandbox.exec("head -c 1000000000 /dev/zero; echo finished >&2")
    assert result.exit_code == 0 and result.truncated and not result.timed_out
    assert result.stdout == "\0" * LIMITS.max_output_bytes and result.stderr == "finished\n"
    assert_still_works(sandbox)


def test_memory_hog_fails_to_allocate(sandbox):
    result = sandbox.exec("python3 -c 'b = bytearray(4 << 30); print(\"allocated\")'")
    assert result.exit_code == 1 and "MemoryError" in result.stderr and "allocated" not in result.stdout
    assert_still_works(sandbox)


def test_huge_file_is_cut_at_the_file_size_limit(sandbox):
    result = sandbox.exec("head -c 50000000 /dev/zero > big.bin")
    assert result.exit_code == 128 + 25  # SIGXFSZ
    assert (sandbox.root / "big.bin").stat().st_size == LIMITS.max_file_mb << 20
    assert_still_works(sandbox)


@pytest.fixture
def host_port():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


CONNECT = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\""


def test_network_is_denied_unless_allowed(backend, host_port):
    with create_sandbox({}, backend=backend, limits=LIMITS) as sb:
        if not sb.denies_network:
            pytest.skip(f"the {backend} backend does not promise to deny network access")
        denied = sb.exec(CONNECT.format(port=host_port))
        assert denied.exit_code != 0 and "connected" not in denied.stdout
        assert "ConnectionRefused" in denied.stderr or "unreachable" in denied.stderr.lower(), denied.stderr
    allowed_limits = SandboxLimits(timeout_s=20, network=True)
    with create_sandbox({}, backend=backend, limits=allowed_limits) as sb:
        allowed = sb.exec(CONNECT.format(port=host_port))
        assert allowed.stdout == "connected\n", allowed.stderr  # the same probe can succeed


def test_writes_outside_the_tree_are_denied(sandbox, backend):
    if not sandbox.read_only_system:
        pytest.skip(f"the {backend} backend does not promise a read-only system here")
    token = f"escape-{uuid.uuid4().hex}"
    targets = [Path("/etc") / token, Path("/usr") / token, Path.home() / token, Path("/") / token]
    try:
        for target in targets:
            result = sandbox.exec(f"echo pwned > {target}")
            assert result.exit_code != 0, f"writing {target} succeeded"
            assert not target.exists(), f"{target} appeared on the host"
    finally:
        for target in targets:
            target.unlink(missing_ok=True)
    assert_still_works(sandbox)


def test_another_sandboxs_tree_can_be_neither_read_nor_written(sandbox, backend):
    if not sandbox.hides_other_sandboxes:
        pytest.skip(f"the {backend} backend does not promise to hide other sandboxes here")
    with create_sandbox({"secret.txt": "other's secret\n"}, backend=backend, limits=LIMITS) as other:
        read = sandbox.exec(f"cat {other.root}/secret.txt")
        write = sandbox.exec(f"echo pwned > {other.root}/planted.txt")
        listing = sandbox.exec(f"ls {other.root.parent.parent}")
        assert read.exit_code != 0 and "secret" not in read.stdout
        assert write.exit_code != 0 and not (other.root / "planted.txt").exists()
        assert str(other.uid or "") not in listing.stdout and other.root.parent.name not in listing.stdout


def test_path_escapes_in_file_methods_are_rejected(sandbox, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("host file\n")
    assert sandbox.exec(f"ln -s {outside} link.txt && ln -s {tmp_path} linkdir").exit_code == 0
    for path in ("../escape.txt", "/etc/passwd", "link.txt", "linkdir/outside.txt"):
        with pytest.raises(SandboxError, match="sandbox path"):
            sandbox.read_file(path)
        with pytest.raises(SandboxError, match="sandbox path"):
            sandbox.write_file(path, "pwned")
    assert outside.read_text() == "host file\n" and sorted(p.name for p in tmp_path.iterdir()) == ["outside.txt"]


def test_background_job_does_not_outlive_its_exec(sandbox):
    marker = ["sleep", f"1000.{uuid.uuid4().int % 10**6}"]
    result = sandbox.exec(f"{' '.join(marker)} & echo started")
    assert result.stdout == "started\n" and result.duration_s < 5
    assert wait_until(lambda: not processes_running(marker))
    assert_still_works(sandbox)


def test_destroy_kills_what_escaped_the_exec(backend):
    marker = ["sleep", f"1000.{uuid.uuid4().int % 10**6}"]
    sb = create_sandbox({}, backend=backend, limits=LIMITS)
    try:
        # A new session leaves the command's process group; the sleep gives it time to.
        if not sb.kills_escaped_processes:
            pytest.skip(f"the {backend} backend does not promise to end processes that left the command's group here")
        sb.exec(f"setsid {' '.join(marker)} > /dev/null 2>&1 < /dev/null & sleep 0.5")
        if backend == "bwrap":  # the pid namespace ended with the exec
            assert wait_until(lambda: not processes_running(marker))
        else:
            time.sleep(0.3)
            assert processes_running(marker), "the escaped process should still run until destroy"
    finally:
        sb.destroy()
    assert wait_until(lambda: not processes_running(marker))


def test_destroy_kills_a_command_still_running(backend):
    marker = ["sleep", f"1000.{uuid.uuid4().int % 10**6}"]
    sb = create_sandbox({}, backend=backend, limits=LIMITS)
    results = []
    runner = threading.Thread(target=lambda: results.append(sb.exec(marker, timeout_s=60)))
    runner.start()
    try:
        assert wait_until(lambda: bool(processes_running(marker)))
    finally:
        sb.destroy()
    runner.join(timeout=10)
    assert not runner.is_alive() and results[0].exit_code == 128 + 9 and not results[0].timed_out
    assert not processes_running(marker) and not sb.root.exists()


def test_bwrap_command_has_no_capabilities_and_sees_no_host_home(backend):
    if backend != "bwrap":
        pytest.skip("bwrap only")
    home = Path.home()
    python_dirs = {
        Path(prefix).relative_to(home).parts[0] for prefix in {sys.prefix, sys.base_prefix} if Path(prefix).is_relative_to(home)
    }
    with create_sandbox({}, backend=backend, limits=LIMITS) as sb:
        result = sb.exec(f"grep -E '^Cap(Prm|Eff)' /proc/self/status; ls -A {home}; ls -A /home")
    assert result.stdout.startswith("CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n")
    visible = set(result.stdout.split("\n", 2)[2].split())
    assert visible <= python_dirs  # only the way to the framework's own Python, if it lives there
