"""Preemption on the real Slurm: the warning signal reaches the controller, which saves the last
finished step; the job is requeued (by us under the sbatch template, by submitit under Hydra's
launcher), runs again in the same run dir, resumes from that checkpoint and trains every
remaining step once, with the roles on their own (fake) GPUs. The submitit path runs across two
nodes (tests/slurm/test_two_nodes.py, `requeue_under_submitit`), which checks the same resume and
more; a one-node copy of it re-proved the same thing.

Slurm holds a requeued job for about 2 minutes before it may start again; the tests lift that
hold (`scontrol update StartTime=now`), which changes nothing about how the job runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.launch.launch_support import scalars, stream_items, trained_items
from tests.paths import REPO_ROOT
from tests.slurm.test_launch import TINY, _job_env

STEPS = 5
# Slow rewards make each rollout take seconds, so the signal lands while the run is going.
REQUEUE_RUN = [
    *TINY,
    f"run.steps={STEPS}",
    "run.save_every=100",
    "logging.rollouts_per_step=16",
    "data.reward=tests.toy_rewards:slow_e_fraction",
    "roles.trainer.gpus=1",
    "roles.rollout.gpus=1",
    "run.placement=disaggregated",
]
# The default run dir's stamp in a Slurm job is its id, which a requeued job keeps.
STAMPED_DIR = "${run_stamp:${cluster.name}}"


def test_sbatch_job_checkpoints_on_the_warning_signal_and_resumes_after_requeue(slurm, tmp_path):
    first = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--output={tmp_path}/slurm-%j.out",
            "slurm/loongsage.sbatch",
            *REQUEUE_RUN,
            f"run.dir='{tmp_path}/{STAMPED_DIR}'",
        ],
        cwd=REPO_ROOT,
        env=_job_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert first.returncode == 0, first.stderr
    first_id = first.stdout.strip().split(";")[0]
    slurm.wait_gone(first_id, timeout_s=120)
    # By its id: the job it submits may have started and written its own slurm-<id>.out already.
    note = (tmp_path / f"slurm-{first_id}.out").read_text()
    submitted = re.search(r"Submitted batch job (\d+)", note)
    assert submitted, note
    job_id = submitted.group(1)
    log = tmp_path / f"slurm-{job_id}.out"

    _wait_for_line(log, "step 2/", timeout_s=300, job=(slurm, job_id))
    # The template's controller is the batch shell: --signal=B:USR2@... reaches it the same way.
    subprocess.run(["scancel", "--batch", "--signal=USR2", job_id], check=True, timeout=30)
    _lift_requeue_hold(slurm, job_id, log)
    slurm.wait_gone(job_id, timeout_s=600)
    _assert_resumed_once(log.read_text(), tmp_path / f"slurm-{job_id}")


def requeue_under_submitit(slurm, tmp_path, *overrides: str) -> tuple[str, str]:
    """REQUEUE_RUN (plus `overrides`) through Hydra's submitit launcher, warned with USR2 after
    step 2, requeued by submitit and run to the end: (the job's logs, its id). The run dir is
    tmp_path/slurm-<id>."""
    sweep = tmp_path / "sweep"
    launcher = subprocess.Popen(
        [
            sys.executable,
            "launch.py",
            "-m",
            *REQUEUE_RUN,
            *overrides,
            "cluster=slurm",
            "hydra/launcher=slurm",
            f"run.dir='{tmp_path}/{STAMPED_DIR}'",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=REPO_ROOT,
        env=_job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        log = _wait_for_file(sweep, "*_0_log.out", timeout_s=120)
        job_id = log.name.split("_")[0]
        _wait_for_line(log, "step 2/", timeout_s=300, job=(slurm, job_id), also=log.with_name(log.name.replace(".out", ".err")))
        # Under submitit the controller is a job step: the signal goes to the steps.
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)
        _lift_requeue_hold(slurm, job_id, log)
        output, _ = launcher.communicate(timeout=600)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, output[-4000:]
    logs = log.read_text() + log.with_name(log.name.replace(".out", ".err")).read_text()
    # submitit's own handler requeued it, and its job wrapper ran the call a second time.
    assert f"submitit requeues job {job_id}" in logs, logs[-4000:]
    assert logs.count(f"Starting with JobEnvironment(job_id={job_id},") == 2, logs[-4000:]
    return logs, job_id


def _assert_resumed_once(logs: str, run_dir: Path) -> None:
    stopped = re.search(r"\[loongsage\] stopping at step (\d+): checkpoint written", logs)
    assert stopped, logs[-4000:]
    step = int(stopped.group(1))
    assert 2 <= step < STEPS
    assert re.search(rf"resumed from .*step_{step:06d} at step {step}\b", logs), logs[-4000:]
    # Both attempts ran in one run dir (the job id stamp), and each step was trained once.
    assert sorted(scalars(run_dir)["train/loss"]) == list(range(1, STEPS + 1))
    by_step: dict[int, set[str]] = {}
    for trained_step, item in trained_items(run_dir):
        by_step.setdefault(trained_step, set()).add(item)
    stream = stream_items(2 * STEPS)
    assert by_step == {s: set(stream[2 * (s - 1) : 2 * s]) for s in range(1, STEPS + 1)}
    # The roles ran on their own fake GPUs of the allocation.
    assert re.search(r"trainer\[0\]: \S+ GPU \d", logs) and re.search(r"rollout\[0\]: \S+ GPU \d", logs), logs[-4000:]


def _lift_requeue_hold(slurm, job_id: str, log: Path, timeout_s: float = 180) -> None:
    """Wait until the job is back in the queue after its requeue, then let it start now."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True, text=True, timeout=30
        ).stdout.split()
        if state and state[0] == "PENDING":
            # Not `now`: slurmd refuses a credential issued in the same second as the requeue revoked
            # the job's old one ("Job credential revoked"), and the job then ends instead of running.
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now+3"], check=True, timeout=30)
            return
        time.sleep(1)
    raise AssertionError(f"job {job_id} was not requeued within {timeout_s:.0f} s: {log.read_text()[-4000:]}")


def _wait_for_file(folder: Path, pattern: str, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(folder.rglob(pattern))
        if found:
            return found[0]
        time.sleep(1)
    raise AssertionError(f"no {pattern} under {folder} after {timeout_s:.0f} s")


def _wait_for_line(log: Path, text: str, timeout_s: float, job, also: Path | None = None) -> None:
    """Until `text` is logged; fails at once if the job (slurm, id) has ended without it."""
    slurm, job_id = job
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        content = "".join(p.read_text() for p in (log, also) if p is not None and p.exists())
        if text in content:
            return
        if not slurm.in_queue(job_id):
            raise AssertionError(f"job {job_id} ended before logging {text!r}: {content[-4000:]}")
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {log} after {timeout_s:.0f} s")
