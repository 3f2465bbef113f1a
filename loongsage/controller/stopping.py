"""Every way a person or a scheduler asks a run to stop, in one place.

| signal   | who sends it                       | what the run does                                         |
|----------|------------------------------------|-----------------------------------------------------------|
| SIGINT   | Ctrl-C                             | stops within seconds, whatever it is doing: a step still   |
|          |                                    | rolling out is given up and the last finished step saved;  |
|          |                                    | a step training (or the warm start) is abandoned unsaved   |
| SIGTERM  | `kill`, a scheduler's cancel       | like the Slurm warning: a step training finishes and is    |
|          |                                    | saved, a step still rolling out is given up                |
| SIGUSR2  | Slurm's `--signal=USR2@<seconds>`  | the same, then the job is requeued (cluster/preemption.py) |
| a second SIGINT or SIGTERM | an impatient person | exit at once: every process the run started is killed  |

Handlers only record the signal (the main thread may hold locks the handler would need); the
controller polls `requested` / `urgent` at safe points. The exception is the second signal:
the person has stopped waiting, so the handler kills the run's process tree and exits.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

import psutil

from loongsage.cluster.preemption import PreemptionNotice
from loongsage.transfer.shm_owners import sweep_orphans

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
KILL_WAIT_S = 3.0  # for processes sent SIGTERM to end before they get SIGKILL

log = logging.getLogger(__name__)


class RunStop:
    def __init__(self) -> None:
        self.preemption = PreemptionNotice()  # SIGUSR2
        self.signum: int | None = None  # SIGINT or SIGTERM, the first one received
        self.received_at: float | None = None
        self._previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
        # Processes alive before the run started are not the run's to kill (a test's servers).
        self._existing_children = {child.pid for child in psutil.Process().children(recursive=True)}

    @property
    def requested(self) -> bool:
        """Stop at the next safe point (any of the three signals)."""
        return self.signum is not None or self.preemption.requested

    @property
    def urgent(self) -> bool:
        """Stop now, abandoning a training step or the warm start (Ctrl-C)."""
        return self.signum == signal.SIGINT

    @property
    def reason(self) -> str:
        if self.signum == signal.SIGINT:
            return "Ctrl-C (SIGINT)"
        return signal.Signals(self.signum or self.preemption.signum).name

    def seconds_since(self) -> float:
        received = self.received_at if self.signum is not None else self.preemption.received_at
        return 0.0 if received is None else time.monotonic() - received

    @contextmanager
    def ignored_by_children(self):
        """Processes started inside this block (Ray's head, raylet, agents, workers) ignore SIGINT
        and the Slurm warning: a terminal's Ctrl-C reaches its whole process group, and Ray's own
        processes must stay up while the controller saves; they are stopped in order afterwards."""
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            with self.preemption.ignored_by_children():
                yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def listen(self) -> None:
        """Install the handlers (main thread only). SIGINT is handled even where it was inherited
        as ignored (a background job), so `kill -INT` always means the same thing; Ray's own
        SIGTERM handler, installed by ray.init, is replaced: it dumps native stacks and aborts."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("signal handlers can only be installed from the main thread")
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)
        self.preemption.listen()

    def close(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self.preemption.close()

    def kill_leftover_processes(self) -> list[str]:
        """Kill what the run started and is still alive (after Ray's shutdown: its agents can
        outlive it); the names of what had to be killed."""
        leftovers = self._started_by_run()
        names = [describe_process(p) for p in leftovers]
        terminate_processes(leftovers)
        return names

    def _started_by_run(self) -> list[psutil.Process]:
        return [p for p in _descendants() if p.pid not in self._existing_children]

    def _on_signal(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
            self.received_at = time.monotonic()
            hint = "stopping within seconds" if signum == signal.SIGINT else "stopping after the step in progress"
            # Said from the handler: the person needs it now. Logging's handler lock is reentrant and
            # handlers run on the main thread, so this cannot deadlock on a record being written.
            log.info("%s received: %s; press Ctrl-C again to exit at once", self.reason, hint)
            return
        self._exit_now(signum)

    def _exit_now(self, signum: int) -> None:
        log.info("%s again: exiting now; the run dir keeps its last complete checkpoint", signal.Signals(signum).name)
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)  # a third press must not interrupt the kill
        terminate_processes(self._started_by_run(), wait_s=0.5)
        sweep_orphans()  # the shared-memory segments of the trainer's workers just killed
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def terminate_processes(processes: list[psutil.Process], wait_s: float = KILL_WAIT_S) -> None:
    for process in processes:
        try:
            process.terminate()
        except psutil.Error:
            pass
    kill_processes(still_running(processes, wait_s), wait_s)


def kill_processes(processes: list[psutil.Process], wait_s: float = KILL_WAIT_S) -> None:
    """SIGKILL, then wait up to `wait_s` for them to have exited."""
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass
    still_running(processes, wait_s)


def still_running(processes: list[psutil.Process], wait_s: float) -> list[psutil.Process]:
    """Those not exited within `wait_s`. A zombie has exited (it holds no port, file or memory):
    an orphan's reaper, PID 1, may leave it for a second or more, which psutil.wait_procs waits out."""
    deadline = time.monotonic() + wait_s
    running = list(processes)
    while running:
        running = [process for process in running if _is_running(process)]
        if not running or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    psutil.wait_procs([p for p in processes if p not in running], timeout=0)  # reaps this process's own children
    return running


def _is_running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def describe_process(process: psutil.Process) -> str:
    try:
        return f"{process.pid} ({process.name()})"
    except psutil.Error:
        return str(process.pid)
