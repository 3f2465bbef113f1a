"""The critic of algorithm.advantage=gae on the megatron backend: a GPTModel of the policy's spec,
loaded from the run's starting checkpoint, whose output layer on the last pipeline stage is a
value head (one number per position, zero at the start) instead of the vocabulary projection; its
own DDP and optimizer in the policy's layout (tp, pp, dp, ep), driven by the same schedule, and
PPO's clipped value loss. As on the HF backend (training/fsdp/critic.py): a zero head makes the
first values 0."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loongsage.training.batch import PackedBatch
from loongsage.training.megatron import checkpoint, cpu_shims
from loongsage.training.megatron.convert import load_hf_weights
from loongsage.training.megatron.model import build_model, gpt_model
from loongsage.training.megatron.optim import build_optimizer, set_lr, wrap_ddp
from loongsage.training.megatron.parallel import Layout
from loongsage.training.megatron.schedule import run_micro_batches
from loongsage.training.objective import value_objective
from loongsage.training.shares import global_shares


class ValueHead(nn.Module):
    """Where GPTModel calls its output layer: hidden [S, B, H] -> (values [S, B, 1], None). The
    head is whole on every tensor-parallel rank; under sequence parallelism it first gathers the
    sequence (unless the caller already has, as forward_logits does for a prompt it skips), and
    the gather's backward only splits: every rank computes the same loss from the same values."""

    def __init__(self, hidden_size: int, dtype: torch.dtype, sequence_parallel: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, hidden_size, dtype=dtype, device=cpu_shims.device()))
        self.bias = nn.Parameter(torch.zeros(1, dtype=dtype, device=cpu_shims.device()))
        self.sequence_parallel = sequence_parallel

    def forward(self, hidden: Tensor, weight: Tensor | None = None, runtime_gather_output=None) -> tuple[Tensor, None]:
        if self.sequence_parallel:
            from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

            hidden = gather_from_sequence_parallel_region(hidden, tensor_parallel_output_grad=False)
        return F.linear(hidden, self.weight, self.bias), None


def values_of(output: Tensor, _layout: Layout) -> Tensor:
    """The last stage's output [B, C + 1, 1] -> the value of each column's state [B, C], float32."""
    return output[:, :-1, 0].float()


class MegatronCritic:
    """The value model of one megatron rank. It has what checkpoint.save / load read of a trainer
    rank (model, optimizer, layout, trainer, dtype, rank, step, spec, model_path), so its
    distributed checkpoint is the policy's format, without the HF export (no HF model holds a
    value head)."""

    def __init__(self, worker, value_clip: float):
        self.layout, self.dtype, self.rank = worker.layout, worker.dtype, worker.rank
        self.spec, self.model_path, self.step = worker.spec, worker.model_path, 0
        self.trainer = replace(worker.trainer, lr=worker.trainer.critic.lr)
        model = build_model(self.spec, dtype=self.dtype)
        load_hf_weights(model, self.model_path, self.spec)  # before the head swap: the HF names map the vocabulary layer
        gpt = gpt_model(model)
        # Its own head, tied to nothing: no stage sums the embedding's gradient with an output layer's.
        gpt.share_embeddings_and_output_weights = False
        if gpt.post_process:
            gpt.output_layer = ValueHead(gpt.config.hidden_size, self.dtype, gpt.config.sequence_parallel)
        self.model = wrap_ddp(model, self.trainer.megatron)
        self.optimizer = build_optimizer(self.model, self.trainer, self.trainer.megatron)
        self.value_clip = value_clip

    @torch.no_grad()
    def values(self, micros: list[PackedBatch]) -> list[Tensor | None]:
        """Each micro-batch's values [B, C] on the last pipeline stage; None on the others."""
        self.model.eval()
        values: list[Tensor | None] = [None] * len(micros)

        def on_values(index: int, _micro: PackedBatch, micro_values: Tensor) -> Tensor:
            values[index] = micro_values
            return micro_values.sum()

        run_micro_batches(self.model, micros, self.layout, on_values, forward_only=True, read_output=values_of)
        return values

    def update(self, micros: list[PackedBatch], lr_scale: float) -> float:
        """One optimizer step on the token-mean clipped value loss of one (all-rank) mini-batch, at
        trainer.critic.lr times the policy's warmup factor; the loss on the last stage (0 elsewhere)."""
        shares = global_shares(micros, "token_mean", self.layout.dp_cpu_group)
        total = 0.0

        def on_values(index: int, micro: PackedBatch, micro_values: Tensor) -> Tensor:
            nonlocal total
            loss = value_objective(micro_values, micro, self.value_clip)
            total += loss.item() * shares[index]
            return loss * (shares[index] * self.layout.dp_size)

        set_lr(self.optimizer, self.trainer.lr * lr_scale)
        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        run_micro_batches(self.model, micros, self.layout, on_values, forward_only=False, read_output=values_of)
        with cpu_shims.cuda_literals_on_cpu():
            self.optimizer.step()
        summed = torch.tensor(total, dtype=torch.float64)
        torch.distributed.all_reduce(summed, group=self.layout.dp_cpu_group)
        return float(summed)

    def save(self, out: Path, step: int) -> None:
        self.step = step
        checkpoint.save(out, self, hf_export=False)

    def load(self, src: Path) -> None:
        checkpoint.load(src, self, hf_fallback=False)
