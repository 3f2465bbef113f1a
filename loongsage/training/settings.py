"""The trainer's settings are the config's own dataclasses (`TrainerConfig`,
`AlgorithmConfig`): one place for every default. Callers may hand in those, an OmegaConf
node or any object with the same attribute names; workers always get plain dataclasses,
so a Ray actor never depends on the config library.

`train_ranks` / `data_parallel_size` (how many ranks, how many data-parallel shards) live in
`loongsage.config.parallel`, which the config rules use too; they are importable from here.
"""

from __future__ import annotations

from dataclasses import fields

from loongsage.config.parallel import data_parallel_key, data_parallel_size, train_ranks, train_ranks_named, uses_megatron
from loongsage.config.schema import AlgorithmConfig, CriticConfig, MegatronConfig, MoeConfig, TrainerConfig

__all__ = [
    "algo_settings",
    "data_parallel_key",
    "data_parallel_size",
    "train_ranks",
    "train_ranks_named",
    "trainer_settings",
    "uses_megatron",
]


def trainer_settings(cfg) -> TrainerConfig:
    settings = _read(TrainerConfig, cfg)
    settings.betas = [float(b) for b in settings.betas]
    settings.megatron = _read(MegatronConfig, settings.megatron)  # a plain dataclass, whatever `cfg` held
    settings.moe = _read(MoeConfig, settings.moe)
    settings.critic = _read(CriticConfig, settings.critic)
    return settings


def algo_settings(cfg) -> AlgorithmConfig:
    return _read(AlgorithmConfig, cfg)


def _read(cls, cfg):
    defaults = cls()
    return cls(**{f.name: getattr(cfg, f.name, getattr(defaults, f.name)) for f in fields(cls)})
