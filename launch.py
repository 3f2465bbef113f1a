"""LoongSage entry point: compose the config with Hydra, check it, hand it to the controller.

python launch.py recipe=math_grpo model=tiny run.steps=2 run.dir=/tmp/run
python launch.py recipe=math_grpo --cfg job      # print the composed config
"""

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
        sys.exit(2)
    from loongsage.controller import run

    run(config)


if __name__ == "__main__":
    main()
