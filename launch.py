"""LoongSage entry point: compose the config with Hydra, check it, hand it to the controller.

    python launch.py recipe=math_grpo model=tiny run.steps=2 run.dir=/tmp/run
    python launch.py recipe=math_grpo --cfg job      # print the composed config
"""
import sys

import hydra
from omegaconf import DictConfig

from loongsage.config import ConfigError, register, to_config

register()


@hydra.main(version_base=None, config_path="recipes", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        config = to_config(cfg)
    except ConfigError as error:
        print(f"loongsage: {error}", file=sys.stderr)
        sys.exit(2)
    from loongsage.controller import run

    run(config)


if __name__ == "__main__":
    main()
