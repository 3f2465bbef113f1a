"""`python -m loongsage.cluster.job_shape`: the sbatch options (first line, unchanged) and, with
--container, the words that run the controller inside cluster.container; and the sbatch
template that uses both, run without Slurm (programs on PATH stand in for the container runtime)."""

from __future__ import annotations

import os
import subprocess
import sys

from loongsage.cluster.job_shape import controller_words, main
from loongsage.config import ContainerConfig, register
from tests.paths import REPO_ROOT

register()


class Cluster:
    def __init__(self, container: ContainerConfig):
        self.container = container


def test_sbatch_options_line_is_unchanged_by_the_container(capsys):
    assert main(["cluster=example_site"]) == 3  # not inside a job of that shape
    assert capsys.readouterr().out.splitlines() == [
        "--nodes=4 --ntasks-per-node=1 --time=1440 --signal=B:USR2@120 --requeue --gpus-per-node=8 "
        "--cpus-per-task=96 --mem=900G --partition=gpu --account=my-project"
    ]


def test_controller_words_pyxis_step_on_the_batch_node_or_runtime_prefix():
    pyxis = Cluster(ContainerConfig("pyxis", "img", ["/lustre:/lustre"]))
    assert controller_words(pyxis, "/lustre/me", {"SLURMD_NODENAME": "gpu01"}) == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "-w",
        "gpu01",
        "--container-image=img",
        "--container-mounts=/lustre:/lustre",
        "--container-workdir=/lustre/me",
    ]
    apptainer = Cluster(ContainerConfig("apptainer", "/i.sif"))
    assert controller_words(apptainer, "/w", {}) == ["apptainer", "exec", "--nv", "/i.sif"]
    assert controller_words(Cluster(ContainerConfig()), "/w", {}) == []


def test_container_mode_prints_one_word_a_line(capsys):
    assert (
        main(
            [
                "--container",
                "cluster=example_site",
                "cluster.container.runtime=apptainer",
                "cluster.container.image=/images/my run.sif",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines() == [
        "apptainer",
        "exec",
        "--nv",
        "--bind",
        "/lustre/home:/lustre/home",
        "/images/my run.sif",
    ]
    assert main(["--container", "cluster=slurm"]) == 0
    assert capsys.readouterr().out == "\n"


def test_container_mode_names_a_bad_key(capsys):
    assert main(["--container", "cluster=example_site", "cluster.container.mounts=[/lustre]"]) == 2
    assert "cluster.container.mounts[0]='/lustre' is not host_path:container_path" in capsys.readouterr().err


def _run_template(tmp_path, *overrides: str, **job_env: str) -> list[str]:
    """The template inside a job of the right shape; what it finally runs, one word a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake_python = bin_dir / "python"
    # job_shape runs for real; launch.py and the container runtime only say how they were called.
    fake_python.write_text(
        f'#!/bin/bash\nif [ "$1" = launch.py ]; then printf "%s\\n" python "$@"; exit; fi\nexec {sys.executable} "$@"\n'
    )
    for runtime in ("apptainer", "srun"):
        (bin_dir / runtime).write_text(f'#!/bin/bash\nprintf "%s\\n" {runtime} "$@"\n')
    for program in bin_dir.iterdir():
        program.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "LOONGSAGE_PYTHON": str(fake_python),
        "SLURM_SUBMIT_DIR": str(REPO_ROOT),
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_GPUS_ON_NODE": "8",
        "PYTHONPATH": str(REPO_ROOT),
        **job_env,
    }
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "slurm" / "loongsage.sbatch"), "recipe=math_grpo", *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [line.replace(str(fake_python), "python") for line in done.stdout.splitlines()]


def test_template_without_container_runs_the_controller_as_before(tmp_path):
    assert _run_template(tmp_path) == ["python", "launch.py", "cluster=slurm", "recipe=math_grpo"]


def test_template_runs_the_controller_inside_apptainer(tmp_path):
    image = ["cluster.container.runtime=apptainer", "cluster.container.image=/images/run.sif"]
    assert _run_template(tmp_path, *image) == [
        "apptainer",
        "exec",
        "--nv",
        "/images/run.sif",
        "python",
        "launch.py",
        "cluster=slurm",
        "recipe=math_grpo",
        *image,
    ]


def test_template_runs_the_controller_in_a_pyxis_step(tmp_path):
    # The site's setup lines (module load, a venv) belong to a real site; none here.
    assert _run_template(
        tmp_path, "cluster=example_site", "cluster.setup=[]", SLURM_JOB_NUM_NODES="4", SLURMD_NODENAME="gpu01"
    ) == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "-w",
        "gpu01",
        "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
        "--container-mounts=/lustre/home:/lustre/home",
        f"--container-workdir={REPO_ROOT}",
        "python",
        "launch.py",
        "recipe=math_grpo",
        "cluster=example_site",
        "cluster.setup=[]",
    ]


def test_template_runs_the_setup_lines_before_the_controller(tmp_path):
    setup = "cluster.setup=['export GREETING=hello','echo setup says $GREETING']"
    assert _run_template(tmp_path, setup) == [
        "setup says hello",
        "python",
        "launch.py",
        "cluster=slurm",
        "recipe=math_grpo",
        setup,
    ]
