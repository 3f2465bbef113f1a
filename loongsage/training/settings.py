"""The trainer's settings are the config's own dataclasses (`TrainerConfig`,
`AlgorithmConfig`): one place for every default. Callers may hand in those, an OmegaConf
node or any object with the same attribute names; workers always get plain dataclasses,
so a Ray actor never depends on the config library."""

from __future__ import annotations

from dataclasses import fields

from loongsage.config.schema import AlgorithmConfig, TrainerConfig


def trainer_settings(cfg) -> TrainerConfig:
    settings = _read(TrainerConfig, cfg)
    settings.betas = [float(b) for b in settings.betas]
    return settings


def algo_settings(cfg) -> AlgorithmConfig:
    return _read(AlgorithmConfig, cfg)


def _read(cls, cfg):
    defaults = cls()
    return cls(**{f.name: getattr(cfg, f.name, getattr(defaults, f.name)) for f in fields(cls)})
