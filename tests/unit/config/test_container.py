"""cluster.container as srun options and command prefixes, and what is wrong with a container config."""

from __future__ import annotations

import subprocess

import pytest
from hydra import compose, initialize_config_dir

from loongsage.config import ConfigError, ContainerConfig, register, to_config
from loongsage.config.container import ENROOT_CONF, command_prefix, container_problems, srun_options
from tests.paths import RECIPES_DIR

register()


def test_pyxis_is_srun_options_and_nothing_in_front():
    pyxis = ContainerConfig("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3", ["/lustre/home:/lustre/home", "/data:/data:ro+rprivate"])
    assert srun_options(pyxis, "/lustre/home/me/loongsage") == [
        "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
        "--container-mounts=/lustre/home:/lustre/home,/data:/data:ro+rprivate",
        "--container-workdir=/lustre/home/me/loongsage",
    ]
    assert command_prefix(pyxis, "/w") == []
    # No mounts: no empty --container-mounts, which pyxis rejects.
    assert srun_options(ContainerConfig("pyxis", "/images/run.sqsh"), "/w") == [
        "--container-image=/images/run.sqsh",
        "--container-workdir=/w",
    ]


def test_apptainer_is_a_prefix_with_binds():
    apptainer = ContainerConfig("apptainer", "/images/run.sif", ["/lustre:/lustre", "/data:/mnt/data:ro"])
    assert command_prefix(apptainer, "/w") == [
        "apptainer",
        "exec",
        "--nv",
        "--bind",
        "/lustre:/lustre",
        "--bind",
        "/data:/mnt/data:ro",
        "/images/run.sif",
    ]
    assert srun_options(apptainer, "/w") == []


def test_enroot_is_a_prefix_that_passes_the_job_environment_and_enters_the_workdir():
    enroot = ContainerConfig("enroot", "pytorch", ["/lustre:/lustre", "/data:/data:ro+rprivate"])
    prefix = command_prefix(enroot, "/lustre/me/loongsage")
    assert prefix[:5] == ["enroot", "start", "--rw", "--conf", str(ENROOT_CONF)]
    assert prefix[5:9] == ["--mount", "/lustre:/lustre", "--mount", "/data:/data:x-create=auto,rbind,ro,rprivate"]
    assert prefix[9] == "pytorch"
    assert srun_options(enroot, "/w") == []


def test_enroot_shell_enters_the_workdir_and_runs_the_program(tmp_path):
    prefix = command_prefix(ContainerConfig("enroot", "pytorch"), str(tmp_path))
    in_container = prefix[prefix.index("pytorch") + 1 :]
    out = subprocess.run(
        [*in_container, "bash", "-c", 'echo "$PWD|$1"', "x", "an arg"], capture_output=True, text=True, check=True, cwd="/"
    )
    assert out.stdout.strip() == f"{tmp_path}|an arg"


def test_enroot_conf_passes_the_job_variables_and_not_the_host_layout():
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/me",
        "LD_LIBRARY_PATH": "/opt/lib",
        "PYTHONHOME": "/opt/py",
        "SLURM_JOB_ID": "42",
        "SLURMD_NODENAME": "gpu01",
        "RAY_AUTH_TOKEN": "t0k",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_IB_HCA": "mlx5",
        "HF_HOME": "/lustre/hf",
        "LOONGSAGE_PYTHON": "python",
        "PYTHONPATH": "/lustre/me",
    }
    out = subprocess.run(["bash", "-c", f"source {ENROOT_CONF}; environ"], env=env, capture_output=True, text=True, check=True)
    passed = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert passed == {
        key: env[key]
        for key in (
            "SLURM_JOB_ID",
            "SLURMD_NODENAME",
            "RAY_AUTH_TOKEN",
            "CUDA_VISIBLE_DEVICES",
            "NCCL_IB_HCA",
            "HF_HOME",
            "LOONGSAGE_PYTHON",
            "PYTHONPATH",
        )
    }


def test_runtime_none_adds_nothing():
    none = ContainerConfig(mounts=["/a:/a"])
    assert srun_options(none, "/w") == [] and command_prefix(none, "/w") == []
    assert container_problems(none) == []


@pytest.mark.parametrize(
    "container, message",
    [
        (ContainerConfig("docker", "x"), "cluster.container.runtime='docker' is not one of none, apptainer, enroot, pyxis"),
        (ContainerConfig("pyxis", ""), "cluster.container.image is empty; cluster.container.runtime=pyxis needs"),
        (ContainerConfig("apptainer", "  "), "cluster.container.image is empty"),
        (ContainerConfig("enroot", "docker://nvcr.io#nvidia/pytorch:25.01-py3"), "enroot create --name NAME file.sqsh"),
        (
            ContainerConfig("pyxis", "img", ["/a:/a", "/lustre"]),
            "cluster.container.mounts[1]='/lustre' is not host_path:container_path",
        ),
        (ContainerConfig("pyxis", "img", ["/a:relative"]), "cluster.container.mounts[0]='/a:relative' is not"),
        (ContainerConfig("pyxis", "img", ["/a:/a,/b:/b"]), "cluster.container.mounts[0]='/a:/a,/b:/b' is not"),
        (ContainerConfig("pyxis", "img", ["/a b:/a"]), "cluster.container.mounts[0]='/a b:/a' is not"),
        (ContainerConfig("pyxis", "img", ["/a:/a:"]), "cluster.container.mounts[0]='/a:/a:' is not"),
        (ContainerConfig("pyxis", "img", ["/a:/a:ro:x"]), "cluster.container.mounts[0]='/a:/a:ro:x' is not"),
        (
            ContainerConfig("apptainer", "i.sif", ["/a:/a:ro+rprivate"]),
            "mounts[0]='/a:/a:ro+rprivate': apptainer's --bind takes only",
        ),
    ],
)
def test_bad_container_names_its_key(container, message):
    problems = container_problems(container)
    assert len(problems) == 1 and message in problems[0]
    with pytest.raises(ValueError, match="cluster.container"):
        srun_options(container, "/w")
    with pytest.raises(ValueError, match="cluster.container"):
        command_prefix(container, "/w")


def test_config_rules_report_container_problems_once():
    def compose_config(*overrides: str):
        with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
            return to_config(compose(config_name="config", overrides=["cluster=example_site", *overrides]))

    assert compose_config().cluster.container.runtime == "pyxis"
    with pytest.raises(ConfigError, match=r"cluster.container.mounts\[0\]='/lustre' is not"):
        compose_config("cluster.container.mounts=[/lustre]")
    with pytest.raises(ConfigError) as error:
        compose_config("cluster.container.runtime=docker")
    assert str(error.value).count("cluster.container.runtime") == 1
