"""The `slurm` fixture: a handle on the real one-node cluster that `.ci/slurm_up.sh` starts.

Skips only where Slurm cannot exist (no `sinfo`, or SLURM_CONF unset); on CI both are set,
and a cluster that is configured but not answering is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

START_HINT = 'start it with: eval "$(bash .ci/slurm_up.sh)"'


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path
    partition: str = "debug"

    def sbatch(self, *args: str) -> str:
        """Submit and return the job id."""
        return _run("sbatch", "--parsable", *args).split(";")[0]

    def in_queue(self, job_id: str) -> bool:
        return bool(_run("squeue", "-h", "-j", job_id, "-o", "%i"))

    def wait_gone(self, job_id: str, timeout_s: float = 120.0, poll_s: float = 1.0) -> None:
        """Block until the job has left the queue (finished, failed or cancelled)."""
        deadline = time.monotonic() + timeout_s
        while self.in_queue(job_id):
            if time.monotonic() > deadline:
                state = _run("squeue", "-h", "-j", job_id, "-o", "%T %r")
                raise TimeoutError(f"slurm job {job_id} still queued after {timeout_s:.0f}s: {state}")
            time.sleep(poll_s)


@pytest.fixture(scope="session")
def slurm() -> SlurmCluster:
    if shutil.which("sinfo") is None:
        pytest.skip(f"no Slurm client (sinfo not on PATH); {START_HINT}")
    conf = os.environ.get("SLURM_CONF")
    if not conf:
        pytest.skip(f"SLURM_CONF is unset; {START_HINT}")
    if not Path(conf).is_file():
        pytest.fail(f"SLURM_CONF={conf} is not a file; {START_HINT}")
    try:
        # Compact states: "idle*" (slurmd not responding) must not count as usable.
        states = _run("sinfo", "-h", "-N", "-o", "%N %t")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"Slurm at SLURM_CONF={conf} does not answer ({e}); {START_HINT}")
    if not any(line.split()[1] in ("idle", "mix", "alloc") for line in states.splitlines()):
        pytest.fail(f"no usable node in Slurm at SLURM_CONF={conf}: sinfo says {states!r}")
    return SlurmCluster(conf=Path(conf))
