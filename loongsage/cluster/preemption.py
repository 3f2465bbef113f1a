"""Slurm's warning before a job's time limit or preemption (`--signal=USR2@<seconds>`), turned
into a flag the controller looks at between steps, and the requeue after it has saved.

The signal handler only records the time: the controller is usually blocked in a Ray call or
holds locks, so checkpointing (or even printing) inside the handler could deadlock. The
controller polls `requested` at safe points, saves, tears down, then calls `requeue()`.

Under submitit (hydra/launcher=slurm) the handler we replace is submitit's; `requeue()` hands
the signal back to it, so submitit pickles its resubmission, runs `scontrol requeue` and exits
as it always does. Under the sbatch template there is no such handler and we requeue ourselves.
Outside Slurm the signal still means "checkpoint and stop": `kill -USR2 <pid>`, then run the
same command with the same run.dir to go on.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager

WARNING_SIGNAL = signal.SIGUSR2  # submitit's and our sbatch template's `--signal=USR2@...`

log = logging.getLogger(__name__)


class PreemptionNotice:
    def __init__(self, signum: int = WARNING_SIGNAL):
        self.signum = signum
        self.received_at: float | None = None  # time.monotonic() of the first signal
        self._previous = signal.getsignal(signum)
        self._listening = False

    @property
    def requested(self) -> bool:
        return self.received_at is not None

    def seconds_since(self) -> float:
        return 0.0 if self.received_at is None else time.monotonic() - self.received_at

    @contextmanager
    def ignored_by_children(self):
        """Processes started inside this block (Ray's head, raylets, workers, actors) ignore the
        signal: Slurm sends it to every process of the job step, and only the controller may act
        on it. An ignored disposition survives fork and exec; a handler does not."""
        signal.signal(self.signum, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(self.signum, self._on_signal if self._listening else self._previous)

    def listen(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("signal handlers can only be installed from the main thread")
        self._listening = True
        signal.signal(self.signum, self._on_signal)

    def close(self) -> None:
        """Put back the handler that was there before (submitit's, or the default)."""
        self._listening = False
        signal.signal(self.signum, self._previous)

    def requeue(self, max_requeues: int) -> None:
        """Put this Slurm job back in the queue, saying how. Call last: the job ends by it
        (submitit exits the process; Slurm stops a requeued job's processes). `max_requeues`
        (cluster.max_requeues) bounds our own requeues; submitit applies its max_num_timeout."""
        job_id = os.environ.get("SLURM_JOB_ID")
        if callable(self._previous):
            # submitit's checkpoint_and_try_requeue: it records the resubmission and requeues,
            # then raises SystemExit; it decides whether another timeout is allowed (max_num_timeout).
            log.info("submitit requeues job %s (the requeued job runs the same call again)", job_id)
            self._previous(self.signum, None)
            return
        if not job_id:
            log.info("not a Slurm job: stopped; run the same command again to resume")
            return
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        if restarts >= max_requeues:
            log.info(
                "not requeued: job %s has been requeued %d times (cluster.max_requeues=%d); "
                "submit it again with the same run.dir to go on",
                job_id,
                restarts,
                max_requeues,
            )
            return
        done = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            log.info(
                "`scontrol requeue %s` failed (%s); submit the job again with the same run.dir to resume",
                job_id,
                done.stderr.strip() or done.returncode,
            )
            return
        log.info("requeued Slurm job %s", job_id)

    def _on_signal(self, signum, frame) -> None:
        if self.received_at is None:
            self.received_at = time.monotonic()
