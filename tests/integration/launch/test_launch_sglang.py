"""rollout.engine=sglang through the real entry point, with the embedded engine behind SGLang's
launch flags: the engine's server process is killed twice while the run rolls out, and the run
still trains every prompt exactly once."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.integration.launch.launch_support import launch, scalars
from tests.integration.launch.test_launch_async import TINY

EMBEDDED_COMMAND = f"rollout.sglang.command=[{sys.executable},-m,loongsage.inference.embedded]"
KILLS = 2
WAIT_S = 240


def _server_pids(run_dir: Path) -> list[int]:
    """Engine servers started for this run (their command line names its log dir's run)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"loongsage.inference.embedded" in cmdline and b"--port" in cmdline and _ours(proc, run_dir):
            pids.append(int(proc.name))
    return pids


def _ours(proc: Path, run_dir: Path) -> bool:
    """The server writes into this run's engine log (stdout is the log file)."""
    try:
        return str(run_dir) in os.readlink(proc / "fd" / "1")
    except OSError:
        return False


def _kill_servers_while_rolling_out(run_dir: Path, killed: list[int], stop: threading.Event) -> None:
    """Kill the engine's server after step 1 and again after step 2 (fully_async: rollout of the
    next steps is under way then), each time the live server, so the second kill hits the restart."""
    deadline = time.monotonic() + WAIT_S
    while len(killed) < KILLS and not stop.is_set() and time.monotonic() < deadline:
        pids = [pid for pid in _server_pids(run_dir) if pid not in killed]
        if pids and _steps_logged(run_dir) > len(killed):
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
        time.sleep(0.1)


def _steps_logged(run_dir: Path) -> int:
    try:
        lines = (run_dir / "rollouts.jsonl").read_text().splitlines()
    except OSError:
        return 0
    return len({json.loads(line)["step"] for line in lines if line.endswith("}")})


def _run_killing_the_server(run_dir: Path, *overrides: str, timeout: int) -> tuple[subprocess.CompletedProcess, list[int]]:
    """A fully_async run on the SGLang actor whose server is SIGKILLed after step 1 and step 2."""
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_servers_while_rolling_out, args=(run_dir, killed, stop), daemon=True)
    killer.start()
    try:
        result = launch(
            *TINY,
            f"run.dir={run_dir}",
            "rollout.engine=sglang",
            EMBEDDED_COMMAND,
            "run.mode=fully_async",
            "pipeline.max_staleness=1",
            *overrides,
            timeout=timeout,
        )
    finally:
        stop.set()
        killer.join(10)
    return result, killed


def test_a_run_on_the_sglang_actor_survives_two_engine_deaths(tmp_path):
    run_dir = tmp_path / "sglang"
    result, killed = _run_killing_the_server(run_dir, "run.steps=4", "logging.rollouts_per_step=16", timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert len(killed) == KILLS, f"killed {len(killed)} server(s); the run ended first"

    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    samples_per_item = collections.Counter(row["item_id"] for row in rows)
    steps_per_item = {item: {row["step"] for row in rows if row["item_id"] == item} for item in samples_per_item}
    assert len(samples_per_item) == 4 * 4, "every step trains 4 prompts"
    assert set(samples_per_item.values()) == {4}, "each prompt's whole group trained once"
    assert all(len(steps) == 1 for steps in steps_per_item.values()), "no prompt trained in two steps"

    logged = scalars(run_dir)
    assert logged["faults/engine_restarts"][4] == KILLS
    assert logged["faults/engine_failovers"][4] >= KILLS, "requests in flight at each death were sent again"
    assert (run_dir / "engines" / "engine-0.log").stat().st_size > 0, "the server's output goes to the run dir"


def test_a_run_whose_engine_dies_past_its_restarts_stops_naming_it(tmp_path):
    run_dir = tmp_path / "no_restarts"
    result, killed = _run_killing_the_server(run_dir, "rollout.max_engine_restarts=0", "run.steps=6", timeout=300)
    assert killed, "the run ended before its engine was killed"
    assert result.returncode != 0
    assert "inference engine 0 (" in result.stderr and "rollout.max_engine_restarts=0" in result.stderr, result.stderr[-3000:]
    assert "engine-0.log" in result.stderr, "the message points at the engine's log"
