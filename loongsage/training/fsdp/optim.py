"""AdamW with linear warmup to a constant learning rate."""

from __future__ import annotations

import torch
from torch import nn

from loongsage.config.schema import TrainerConfig
from loongsage.training.lr_schedule import Warmup


def build_optimizer(model: nn.Module, settings: TrainerConfig) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=settings.lr,
        betas=tuple(settings.betas),
        weight_decay=settings.weight_decay,
        # One fused kernel per parameter: on CPU ~6x faster than the for-each or per-tensor
        # implementations (113 vs 686 ms per step on SmolLM2-135M, 2 cores), which allocate
        # model-sized temporaries for every intermediate.
        fused=True,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, Warmup(settings.warmup_steps))
    return optimizer, scheduler
