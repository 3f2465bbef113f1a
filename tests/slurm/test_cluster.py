"""The test cluster itself works: a batch job gets both fake GPUs, and submitit runs a
Python function on it and brings the result back. Every other Slurm test builds on these."""

from __future__ import annotations

import socket
import time

SCRIPT = """#!/bin/bash
echo "host=$(hostname)" > {out}.tmp
echo "job=$SLURM_JOB_ID" >> {out}.tmp
echo "cuda=$CUDA_VISIBLE_DEVICES" >> {out}.tmp
mv {out}.tmp {out}
"""


def _read_keyvals(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_sbatch_job_sees_both_gpus(slurm, tmp_path):
    out = tmp_path / "env.txt"
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT.format(out=out))
    job_id = slurm.sbatch(
        "--nodes=1",
        "--gres=gpu:2",
        f"--partition={slurm.partition}",
        f"--output={tmp_path}/slurm-%j.out",
        f"--chdir={tmp_path}",
        str(script),
    )
    slurm.wait_gone(job_id, timeout_s=120)

    assert out.exists(), f"job {job_id} left no {out.name}; log: {list(tmp_path.glob('slurm-*.out'))}"
    seen = _read_keyvals(out)
    assert seen["job"] == job_id
    assert seen["cuda"] == "0,1"
    assert seen["host"] == socket.gethostname()


def test_submitit_runs_function_and_returns_result(slurm, tmp_path):
    import submitit

    # Defined inside the test so cloudpickle ships it by value: the job needs no import path.
    def answer():
        import os

        return os.environ["SLURM_JOB_ID"], 6 * 7

    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    executor.update_parameters(gpus_per_node=1, timeout_min=5, slurm_partition=slurm.partition)
    job = executor.submit(answer)

    # Without accounting sacct fails and submitit reads the state as UNKNOWN; done() still
    # turns true once the result file is written, so bound the wait ourselves.
    deadline = time.monotonic() + 120
    while not job.done():
        assert time.monotonic() < deadline, f"submitit job {job.job_id} not done after 120s"
        time.sleep(1)

    assert job.result() == (job.job_id, 42)
