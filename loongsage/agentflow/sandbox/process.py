"""Run one sandboxed command: wall-clock timeout, capped output, and nothing left behind.

The command starts in a new session, so its process group is everything it started that
did not call setsid itself. That group is killed when the timeout passes and also when the
command exits: a background job (`server &`) never outlives the exec that started it, on
every backend (under bwrap the pid namespace already enforces this). Whatever escaped the
group is the sandbox's `destroy()` business.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from loongsage.agentflow.sandbox.limits import ExecResult, SandboxError
from loongsage.run_marker import marker_env

_READ_CHUNK = 1 << 20
# After the command exits, how long processes that escaped its group may keep our pipes
# open before we stop reading.
_DRAIN_GRACE_S = 0.1
# Without a pidfd to wake us when the command exits, how often to check.
_POLL_TICK_S = 0.05


@dataclass
class _Stream:
    cap: int
    data: bytearray = field(default_factory=bytearray)
    truncated: bool = False

    def take(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        self.data += chunk

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def run_captured(
    argv: list[str],
    *,
    cwd: str | None,
    env: Mapping[str, str],
    stdin: str | None,
    timeout_s: float,
    max_output_bytes: int,
    popen_options: Mapping[str, object] | None = None,
    on_start: Callable[[subprocess.Popen], None] = lambda proc: None,
    on_finish: Callable[[subprocess.Popen], None] = lambda proc: None,
) -> ExecResult:
    """`argv` to completion or timeout. `on_start`/`on_finish` let the sandbox track live
    processes so that `destroy()` can kill them."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env) | marker_env(),  # found and ended by the next start if the run is killed
            start_new_session=True,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **(popen_options or {}),
        )
    except OSError as exc:
        raise SandboxError(f"cannot start {argv[0]!r}: {exc}") from exc
    on_start(proc)
    try:
        if stdin is not None:
            threading.Thread(target=_feed, args=(proc, stdin), daemon=True).start()
        stdout, stderr, timed_out = _collect(proc, started + timeout_s, max_output_bytes)
    finally:
        kill_group(proc)
        on_finish(proc)  # before reaping: a pid still tracked is never a reused one
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    return ExecResult(
        exit_code=None if timed_out else _shell_exit_code(proc.returncode),
        stdout=stdout.text(),
        stderr=stderr.text(),
        timed_out=timed_out,
        truncated=stdout.truncated or stderr.truncated,
        duration_s=time.monotonic() - started,
    )


def _collect(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[_Stream, _Stream, bool]:
    """Read both pipes, draining past the cap so the command never blocks on a full pipe,
    until the command has exited (or timed out), its group is killed and the pipes closed."""
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = _Stream(cap), _Stream(cap)
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, stdout)
    selector.register(proc.stderr, selectors.EVENT_READ, stderr)
    exit_signal = _exit_signal(proc)
    if exit_signal is not None:
        selector.register(exit_signal, selectors.EVENT_READ, None)
    open_pipes = 2
    timed_out = False
    drain_until: float | None = None  # set once the command is gone and its group killed
    try:
        while True:
            now = time.monotonic()
            if drain_until is None:
                exited = _has_exited(proc)
                if exited or now >= deadline:
                    timed_out = not exited
                    kill_group(proc)
                    drain_until = now + _DRAIN_GRACE_S
            if drain_until is not None and (open_pipes == 0 or now >= drain_until):
                break
            wait = max(0.0, (drain_until if drain_until is not None else deadline) - now)
            if exit_signal is None and drain_until is None:
                wait = min(wait, _POLL_TICK_S)
            for key, _ in selector.select(timeout=wait):
                if key.data is None:  # the pidfd: the command exited
                    selector.unregister(key.fileobj)
                    continue
                chunk = os.read(key.fd, _READ_CHUNK)
                if chunk:
                    key.data.take(chunk)
                else:
                    selector.unregister(key.fileobj)
                    open_pipes -= 1
    finally:
        selector.close()
        if exit_signal is not None:
            os.close(exit_signal)
    return stdout, stderr, timed_out


def _has_exited(proc: subprocess.Popen) -> bool:
    """Whether the command exited, without reaping it: while its zombie holds the pid, the
    process group id cannot be reused, so killing the group never hits a stranger."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _exit_signal(proc: subprocess.Popen) -> int | None:
    """A pidfd that becomes readable when the command exits (Linux >= 5.3), else None."""
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return None


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the command's process group. Only call this before the command is reaped."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _feed(proc: subprocess.Popen, text: str) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(text.encode())
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the command exited or closed stdin without reading it all


def _shell_exit_code(returncode: int) -> int:
    """Shell convention (128 + signal) for a command a signal killed, so that all backends
    report alike: bwrap and apptainer already turn signals into these codes."""
    return 128 - returncode if returncode < 0 else returncode
