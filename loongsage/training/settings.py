"""Plain, picklable views of the trainer and algorithm configs.

The controller hands us dataclasses or OmegaConf nodes; workers get these frozen copies
so a Ray actor never depends on the config library, and every default lives in one place.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

DTYPES = ("float32", "bfloat16")
STRATEGIES = ("ddp", "fsdp2")


@dataclass(frozen=True)
class TrainerSettings:
    world_size: int = 1
    strategy: str = "ddp"
    micro_batch_size: int = 4
    mini_batches: int = 1
    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    dtype: str = "float32"
    num_threads: int = 1
    gradient_checkpointing: bool = False
    weight_sync_bucket_mb: int = 64


@dataclass(frozen=True)
class AlgoSettings:
    clip_low: float = 0.2
    clip_high: float = 0.28
    loss_aggregation: str = "token_mean"
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    entropy_coef: float = 0.0


def trainer_settings(cfg) -> TrainerSettings:
    settings = _read(TrainerSettings, cfg)
    settings = replace(settings, betas=tuple(float(b) for b in settings.betas))
    _check_choice("trainer.strategy", settings.strategy, STRATEGIES)
    _check_choice("trainer.dtype", settings.dtype, DTYPES)
    for name in ("world_size", "micro_batch_size", "mini_batches", "num_threads"):
        if int(getattr(settings, name)) < 1:
            raise ValueError(f"trainer.{name} must be >= 1, got {getattr(settings, name)!r}")
    return settings


def algo_settings(cfg) -> AlgoSettings:
    return _read(AlgoSettings, cfg)


def _read(cls, cfg):
    defaults = cls()
    return cls(**{f.name: getattr(cfg, f.name, getattr(defaults, f.name)) for f in fields(cls)})


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(choices)}")
