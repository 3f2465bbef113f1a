"""The embedded engine as a real process, started the way the engine actor starts it:
`python -m loongsage.inference.embedded <SGLang flags>` with OMP_NUM_THREADS set."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from loongsage.inference.sglang.ports import free_ports

START_S = 180  # imports and model load on 2 shared, loaded cores


@dataclass
class EngineProcess:
    proc: subprocess.Popen
    base_url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def engine_process(model_path: str, log_path: Path, *flags: str, start_s: float = START_S) -> Iterator[EngineProcess]:
    """Started and answering /health_generate; killed at the end if the test did not stop it."""
    port = free_ports("127.0.0.1", 1)[0]
    argv = [sys.executable, "-m", "loongsage.inference.embedded", "--model-path", model_path, "--port", str(port), *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    engine = EngineProcess(proc, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_healthy(engine, start_s)
        yield engine
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_healthy(engine: EngineProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if engine.proc.poll() is not None:
            raise AssertionError(f"engine exited with {engine.proc.returncode} before serving:\n{engine.log()}")
        try:
            if httpx.get(engine.base_url + "/health_generate", timeout=30).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"engine not healthy within {timeout} s:\n{engine.log()}")
        time.sleep(0.2)
