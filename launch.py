"""LoongSage entry point: compose the config with Hydra, check it, hand it to the controller.

python launch.py recipe=math_grpo model=tiny run.steps=2 run.dir=/tmp/run
python launch.py recipe=math_grpo --cfg job      # print the composed config
"""

import os
import sys

import hydra
from omegaconf import DictConfig

from loongsage.cluster.ray_token import ensure_ray_token
from loongsage.config import ConfigError, register, to_config
from loongsage.logs import setup_logging

register()


@hydra.main(version_base=None, config_path="recipes", config_name="config")
def main(cfg: DictConfig) -> None:
    setup_logging()  # here, not at import: Hydra has just applied job_logging, which would reset it
    # Inside a Slurm job the Ray this run starts takes a per-job token; Ray reads it when it is
    # first imported, so it is chosen before anything imports Ray (here or in a submitit job).
    ensure_ray_token()
    try:
        config = to_config(cfg)
    except ConfigError as error:
        print(f"loongsage: {error}", file=sys.stderr)
        _end(2, str(error))
    from loongsage.controller import run
    from loongsage.controller.run import FAILED_EXIT_CODE, REFUSED_EXIT_CODE

    try:
        run(config)
    except SystemExit as stopped:
        if stopped.code in (FAILED_EXIT_CODE, REFUSED_EXIT_CODE):
            _end(stopped.code)
        raise


class JobFailed(RuntimeError):
    """A submitit job's run that was refused or failed (the reason is in the job's log)."""


def _end(code: int, reason: str = "") -> None:
    # In a submitit job (`-m hydra/launcher=slurm`) a bare exit leaves no result file, and where
    # Slurm keeps no accounting the launcher then polls for one forever; an exception is recorded
    # as the job's failure and `launch.py -m` reports it.
    if os.environ.get("SUBMITIT_FOLDER"):
        folder = os.environ["SUBMITIT_FOLDER"].replace("%j", os.environ.get("SLURM_JOB_ID", "%j"))
        raise JobFailed(f"{reason or f'the run ended with exit code {code}'} (the job's logs: {folder})")
    sys.exit(code)


if __name__ == "__main__":
    main()
