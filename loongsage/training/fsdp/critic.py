"""The critic of algorithm.advantage=gae on the HF backend: the policy's transformer with a scalar
head, its own optimizer and schedule, trained with PPO's clipped value loss beside the policy in
the same ranks and process group.

Built from the run's starting checkpoint (as verl and OpenRLHF start a critic from the policy),
with the head at zero: the first values are 0, so the first step's GAE advantages are the plain
(whitened) returns, and the critic learns from there.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist
from torch import Tensor, nn

from loongsage.config.schema import TrainerConfig
from loongsage.models import load_base_model
from loongsage.training.batch import PackedBatch
from loongsage.training.fsdp.optim import build_optimizer
from loongsage.training.fsdp.parallel import clip_grad_norm, grad_sync, wrap_model
from loongsage.training.objective import value_objective
from loongsage.training.shares import global_shares


class ValueModel(nn.Module):
    """V(state) at every position: `model` (the transformer, HF's name, which FSDP wraps layer by
    layer) and `score`, a linear head to one number (HF's name in its *ForTokenClassification)."""

    def __init__(self, model_path: str, dtype: torch.dtype):
        super().__init__()
        self.model = load_base_model(model_path, dtype=dtype)
        self.score = nn.Linear(self.model.config.hidden_size, 1, dtype=dtype)
        nn.init.zeros_(self.score.weight)
        nn.init.zeros_(self.score.bias)

    def forward(self, micro: PackedBatch) -> Tensor:
        """[B, C] float32: column c is the value of the state that predicts targets[:, c]."""
        hidden = self.model(
            input_ids=micro.input_ids,
            attention_mask=micro.attention_mask,
            position_ids=micro.position_ids,
            use_cache=False,
        ).last_hidden_state
        return self.score(hidden[:, micro.first_column : -1]).squeeze(-1).float()


class Critic:
    """The value model of one rank, wrapped like the policy, with its optimizer."""

    def __init__(self, model_path: str, trainer: TrainerConfig, dtype: torch.dtype, value_clip: float):
        self.model = wrap_model(ValueModel(model_path, dtype), trainer.strategy)
        self.optimizer, self.scheduler = build_optimizer(self.model, replace(trainer, lr=trainer.critic.lr))
        self.value_clip, self.max_grad_norm = value_clip, trainer.max_grad_norm

    @torch.no_grad()
    def values(self, micros: list[PackedBatch]) -> list[Tensor]:
        self.model.eval()
        return [self.model(micro) for micro in micros]

    def update(self, micros: list[PackedBatch]) -> float:
        """One optimizer step on the token-mean clipped value loss of one (all-rank) mini-batch;
        returns that loss. Its learning-rate schedule moves once per trainer step, as the policy's."""
        self.model.train()
        shares = global_shares(micros, "token_mean")
        total = 0.0
        for index, micro in enumerate(micros):
            with grad_sync(self.model, enabled=index == len(micros) - 1):
                loss = value_objective(self.model(micro), micro, self.value_clip)
                (loss * (shares[index] * dist.get_world_size())).backward()
            total += loss.item() * shares[index]
        clip_grad_norm(self.model, self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        summed = torch.tensor(total, dtype=torch.float64)
        dist.all_reduce(summed)
        return float(summed)
