"""One server process: started in a process group of its own with its output appended to a log
file, ready once GET /health_generate answers 200, stopped with its whole group.

SGLang's server starts more processes (scheduler per TP rank, detokenizer); they share its
process group, so stopping the group stops them all and nothing is left holding device memory.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import httpx

log = logging.getLogger(__name__)

STOP_GRACE_S = 15.0  # after SIGTERM, before SIGKILL
READY_POLL_S = 0.25
PROBE_TIMEOUT_S = 30.0  # one /health_generate: a real generation, slow on loaded CPUs
TAIL_LINES = 30

# Runs first in the server's process, then becomes the server through exec (same pid, same group):
# the kernel sends the server SIGTERM when the thread that started it dies, even by SIGKILL
# (ray.kill of its actor), so no server outlives its actor holding a port and device memory.
# PR_SET_PDEATHSIG = 1; the parent check covers a starter that died before the prctl.
ORPHAN_GUARD = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class ServerStartError(RuntimeError):
    """The server exited, or did not answer in time, before it served."""


class ServerProcess:
    """`name` ("sglang engine 3") words the messages; `log_path` gets the server's stdout and stderr."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: str | Path, name: str):
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.name = name
        self._popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen else None

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def start(self, url: str, timeout_s: float) -> None:
        self.launch()
        self.wait_ready(url, timeout_s)

    def launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            # A header per start: the log of an engine that restarted holds each start's output in turn.
            out.write(f"\n=== {datetime.now().isoformat(timespec='seconds')} {self.name}: {self.command_line()}\n".encode())
            out.flush()
            self._popen = subprocess.Popen(
                [sys.executable, "-c", ORPHAN_GUARD, str(os.getpid()), *self.argv],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: see stop()
            )

    def wait_ready(self, url: str, timeout_s: float) -> None:
        """Returns once GET `url`/health_generate answers 200. ServerStartError when the process
        exits first (stop() from another thread included) or `timeout_s` passes (it is stopped then)."""
        deadline = time.monotonic() + timeout_s
        probe = f"{url.rstrip('/')}/health_generate"
        while True:
            if not self.alive():
                raise ServerStartError(self._failure(f"exited with code {self.returncode} before answering GET {probe}"))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise ServerStartError(
                    self._failure(
                        f"did not answer GET {probe} within {timeout_s:g} s (rollout.sglang.startup_timeout_s); "
                        f"stopped it (exit code {self.returncode})"
                    )
                )
            if _answers(probe, min(remaining, PROBE_TIMEOUT_S)):
                return
            time.sleep(READY_POLL_S)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the whole group, SIGKILL to what is left of it after `grace_s`. Idempotent;
        callable from any thread (a start waiting in another then fails)."""
        if self._popen is None:
            return
        group = self._popen.pid  # start_new_session: the group's id is the leader's pid
        _signal_group(group, signal.SIGTERM)
        try:
            self._popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) did not stop within %g s of SIGTERM; killing its process group", self.name, group, grace_s)
        # Also after a clean exit of the leader: a child of it may linger in the group.
        _signal_group(group, signal.SIGKILL)
        self._popen.wait()

    def command_line(self) -> str:
        return shlex.join(self.argv)

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        try:
            with open(self.log_path, "rb") as file:
                file.seek(max(0, file.seek(0, os.SEEK_END) - 64 * 1024))
                text = file.read().decode(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def _failure(self, what: str) -> str:
        tail = _indent(self.log_tail())
        return f"{self.name} {what}\n  command: {self.command_line()}\n  log: {self.log_path}, last lines:\n{tail}"


def _answers(url: str, timeout_s: float) -> bool:
    try:
        # trust_env=False: a cluster's HTTP proxy settings must not route a probe of this node away.
        return httpx.get(url, timeout=timeout_s, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _signal_group(group: int, sig: signal.Signals) -> None:
    try:
        os.killpg(group, sig)
    except ProcessLookupError:  # nothing left in it
        pass


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())
