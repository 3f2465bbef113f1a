"""Hydra glue: register the schema, turn a composed DictConfig into a checked `Config`."""
from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from loongsage.config.rules import check
from loongsage.config.schema import Config

SCHEMA_NAME = "loongsage_schema"


def register() -> None:
    ConfigStore.instance().store(name=SCHEMA_NAME, node=Config)
    # `${none_if_empty:${cluster.partition}}`: launcher keys that must be absent, not "".
    if not OmegaConf.has_resolver("none_if_empty"):
        OmegaConf.register_new_resolver("none_if_empty", lambda value: None if value in ("", None, 0) else value)


def to_config(cfg: DictConfig) -> Config:
    """Resolve interpolations, convert to dataclasses and apply the cross-field rules."""
    config = OmegaConf.to_object(cfg)
    check(config)
    return config
