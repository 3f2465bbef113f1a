"""hydra/launcher=slurm puts submitit's task inside cluster.container through srun_args."""

from __future__ import annotations

import os

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from submitit.slurm.slurm import _make_sbatch_string

from loongsage.config import register
from tests.paths import RECIPES_DIR

register()


def launcher_srun_args(*overrides: str):
    with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=["hydra/launcher=slurm", *overrides], return_hydra_config=True)
    return OmegaConf.to_container(cfg.hydra.launcher, resolve=False)["_target_"], cfg.hydra.launcher.srun_args


def test_site_with_pyxis_gets_its_srun_options():
    target, srun_args = launcher_srun_args("cluster=example_site")
    assert target.endswith("hydra_submitit_launcher.submitit_launcher.SlurmLauncher")
    assert list(srun_args) == [
        "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
        "--container-mounts=/lustre/home:/lustre/home",
        f"--container-workdir={os.getcwd()}",
    ]


def test_no_container_leaves_srun_as_it_was():
    assert launcher_srun_args("cluster=slurm")[1] is None


def test_apptainer_goes_in_front_of_submitits_python(tmp_path):
    _, srun_args = launcher_srun_args(
        "cluster=example_site", "cluster.container.runtime=apptainer", "cluster.container.image=/images/run.sif"
    )
    script = _make_sbatch_string(
        command="/venv/bin/python -u -m submitit.core._submit /sweep", folder=tmp_path, srun_args=list(srun_args)
    )
    srun_line = next(line for line in script.splitlines() if line.startswith("srun "))
    assert srun_line.endswith(
        " apptainer exec --nv --bind /lustre/home:/lustre/home /images/run.sif "
        "/venv/bin/python -u -m submitit.core._submit /sweep"
    )


def test_bad_container_stops_the_submission_naming_the_key():
    with pytest.raises(Exception, match="cluster.container.image is empty"):
        launcher_srun_args("cluster=example_site", "cluster.container.image=")
