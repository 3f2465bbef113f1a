"""A tiny recipe on the real Slurm test cluster (two nodes on this machine), the two ways users
submit it: Hydra's submitit launcher and the sbatch template. The Ray bootstrap runs for real inside the jobs.
(Submitit's plain two-task job, where only task 0 runs the controller, is tests/slurm/test_two_nodes.py's
first test.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loongsage.cluster.bootstrap import FIRST_ENGINE_PORT, FIRST_PORT, PORTS_PER_JOB
from tests.integration.launch.launch_support import scalars
from tests.integration.teachers.teacher_support import perturbed_model
from tests.paths import REPO_ROOT

TINY = [
    "recipe=math_grpo",
    "model=tiny",
    "run.steps=2",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "trainer.micro_batch_size=4",
    "cluster.gpus_per_node=2",
    "cluster.time_limit_min=10",
]


def _job_env() -> dict[str, str]:
    """The jobs run this checkout with this interpreter (sbatch passes the environment on)."""
    return {
        **os.environ,
        "LOONGSAGE_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def _launch_on_slurm(tmp_path, *overrides: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """`launch.py -m ... hydra/launcher=slurm` into tmp_path/run, its sweep in tmp_path/sweep."""
    return subprocess.run(
        [
            sys.executable,
            "launch.py",
            "-m",
            *TINY,
            *overrides,
            "cluster=slurm",
            "hydra/launcher=slurm",
            f"run.dir={tmp_path / 'run'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        cwd=REPO_ROOT,
        env=_job_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _assert_trained(run_dir, job_output: Path | None = None) -> None:
    """`job_output`: the job's Slurm output, shown when the run left no TensorBoard files."""
    if not (run_dir / "tensorboard").is_dir():
        shown = job_output.read_text()[-4000:] if job_output and job_output.exists() else "(no job output)"
        pytest.fail(f"the run wrote no {run_dir / 'tensorboard'}; the job printed:\n{shown}")
    logged = scalars(run_dir)
    assert sorted(logged["train/loss"]) == [1, 2]
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000002"


def test_sbatch_template_sizes_the_job_from_cluster_keys(slurm, tmp_path):
    """The template resubmits itself with the GPUs cluster.gpus_per_node asks for, and the run in it
    is the disaggregated SGLang layout: the engine's server gets its seat's device (not the
    trainer's), its ports from the job's port block, and the run trains on it."""
    run_dir = tmp_path / "run"
    server = REPO_ROOT / "tests" / "slurm" / "serve_embedded_showing_devices.py"
    sglang = [
        "rollout.engine=sglang",
        f"rollout.sglang.command=[{sys.executable},{server}]",
        "roles.trainer.gpus=1",
        "roles.rollout.gpus=1",
        "run.placement=disaggregated",
        "run.mode=one_step_off",
    ]
    first = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--output={tmp_path}/slurm-%j.out",
            "slurm/loongsage.sbatch",
            *TINY,
            *sglang,
            f"run.dir={run_dir}",
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
    # The first job lacks the GPUs cluster.gpus_per_node asks for, so it submits the real one.
    note = (tmp_path / f"slurm-{first_id}.out").read_text()
    match = re.search(r"Submitted batch job (\d+)", note)
    assert match and "--gpus-per-node=2" in note, note
    slurm.wait_gone(match.group(1), timeout_s=600)
    job_output = tmp_path / f"slurm-{match.group(1)}.out"
    _assert_trained(run_dir, job_output)
    assert "[loongsage] ray up on 1 node(s)" in job_output.read_text()
    log = (run_dir / "engines" / "engine-0.log").read_text()
    devices = re.findall(r"^CUDA_VISIBLE_DEVICES=(.*)$", log, re.MULTILINE)
    port = int(re.search(r"--port (\d+)", log).group(1))
    assert devices and len(devices[0].split(",")) == 1, log[-2000:]
    assert (port - FIRST_PORT) % PORTS_PER_JOB >= FIRST_ENGINE_PORT, f"port {port} is outside the job's engine ports"


def test_bootstrap_inside_a_job_registers_the_allocation(slurm, tmp_path):
    job_id = slurm.sbatch(
        "--gres=gpu:2",
        f"--output={tmp_path}/slurm-%j.out",
        f"--chdir={REPO_ROOT}",
        f"--export=ALL,PYTHONPATH={REPO_ROOT}",
        f"--wrap={sys.executable} -m loongsage.cluster.bootstrap",
    )
    slurm.wait_gone(job_id, timeout_s=300)
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    # On whichever node of the test cluster Slurm chose.
    assert re.search(rf"ray up on job {job_id}: 1 node\(s\) \S+; GPU 2 ", out), out[-3000:]


def test_a_teacher_engine_on_the_teacher_role_gpu(slurm, tmp_path, tiny_model_path):
    """roles.teacher.gpus=1: the teacher's engine (rollout.engine=sglang, like the student's) serves
    on the allocation's teacher device, not the trainer's and rollout's, and scores every step."""
    run_dir = tmp_path / "run"
    teacher = perturbed_model(tiny_model_path, tmp_path / "teacher", seed=0)
    server = REPO_ROOT / "tests" / "slurm" / "serve_embedded_showing_devices.py"
    layout = [
        "rollout.engine=sglang",
        f"rollout.sglang.command=[{sys.executable},{server}]",
        "roles.trainer.gpus=1",
        "roles.rollout.gpus=1",
        "roles.teacher.gpus=1",
        f"teachers.pool=[{{name: t, model: '{teacher}'}}]",
        "data.teacher=t",
    ]
    result = _launch_on_slurm(tmp_path, *layout)
    assert result.returncode == 0, result.stderr[-4000:]
    _assert_trained(run_dir)
    logged = scalars(run_dir)
    assert sorted(logged["teacher/reverse_kl/t"]) == [1, 2] and logged["teacher/samples"][1] == 4
    # the student's engine (index 0) on the colocated trainer's device, the teacher's (index 1) on its own
    student, teaching = ((run_dir / "engines" / f"engine-{i}.log").read_text() for i in (0, 1))
    devices = [re.findall(r"^CUDA_VISIBLE_DEVICES=(\S+)$", log, re.MULTILINE)[0] for log in (student, teaching)]
    assert len(set(devices)) == 2 and all(re.fullmatch(r"\d+(,\d+)*", d) for d in devices), devices
    assert f"--model-path {teacher}" in teaching and "--weight-version t" in teaching, teaching[-2000:]


def test_megatron_tensor_parallel_trainer_on_the_allocations_gpus(slurm, tmp_path):
    """trainer.backend=megatron on Slurm: its tp * pp * dp ranks are placed on the trainer role's
    devices (one rank each), the engine colocated with them."""
    run_dir = tmp_path / "run"
    megatron = [
        "trainer.backend=megatron",
        "trainer.megatron.tp=2",
        "roles.trainer.gpus=2",
        "roles.rollout.gpus=2",
        "rollout.num_engines=2",
    ]
    result = _launch_on_slurm(tmp_path, *megatron)
    assert result.returncode == 0, result.stderr[-4000:]
    _assert_trained(run_dir)
    state = (run_dir / "checkpoints" / "step_000002" / "trainer" / "trainer_state.json").read_text()
    assert '"tp": 2' in state


def test_a_job_whose_config_is_refused_fails_the_launch_at_once(slurm, tmp_path):
    """The refusal reaches `launch.py -m` as the job's failure. A bare exit left submitit no
    result to read, and this cluster keeps no accounting, so the launcher polled forever."""
    bad = ["roles.trainer.gpus=2", "roles.rollout.gpus=2"]  # 1 trainer rank, 1 engine: roles unfilled
    result = _launch_on_slurm(tmp_path, *bad, timeout=120)
    assert result.returncode != 0
    assert "JobFailed: invalid config" in result.stderr and "roles.trainer.gpus=2" in result.stderr, result.stderr[-3000:]
