"""Step metrics accumulated over micro-batches and reduced over ranks."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from loongsage.algorithms.losses import mismatch_k3_kl
from loongsage.training.batch import PackedBatch
from loongsage.training.fsdp.objective import MicroObjective


class StepMetrics:
    """Per-rank shares of the step's metrics, summed over ranks at the end.

    Every entry is pre-weighted by its share of the global batch, so the all-reduced sum
    is the global value and every rank returns the same metrics.
    """

    KEYS = ("loss", "pg_loss", "entropy", "clip_frac", "kl", "mismatch_k3_kl", "mismatch_tokens", "tokens")

    def __init__(self, with_kl: bool):
        self.values = dict.fromkeys(self.KEYS, 0.0)
        self.grad_norm = 0.0
        self.with_kl = with_kl

    def add_micro(
        self, micro: PackedBatch, result: MicroObjective, old: Tensor | None, weight: float, token_weight: float
    ) -> None:
        v = self.values
        v["loss"] += result.loss.item() * weight
        v["pg_loss"] += result.pg_loss * weight
        v["kl"] += result.kl * weight
        v["entropy"] += result.entropy * weight
        v["clip_frac"] += result.clip_frac * token_weight
        tokens = float(micro.loss_mask.sum())
        v["tokens"] += tokens
        if micro.rollout_logprobs is None:
            return
        train_logprobs = result.logprobs if old is None else old
        v["mismatch_k3_kl"] += mismatch_k3_kl(train_logprobs, micro.rollout_logprobs, micro.loss_mask).item() * tokens
        v["mismatch_tokens"] += tokens

    def reduce(self, num_minis: int, lr: float) -> dict[str, float]:
        totals = torch.tensor([self.values[key] for key in self.KEYS], dtype=torch.float64)
        dist.all_reduce(totals)
        total = dict(zip(self.KEYS, totals.tolist()))
        metrics = {
            "train/loss": total["loss"] / num_minis,
            "train/pg_loss": total["pg_loss"] / num_minis,
            "train/entropy": total["entropy"] / num_minis,
            "train/clip_frac": total["clip_frac"] / num_minis,
            "train/grad_norm": self.grad_norm / num_minis,
            "train/lr": lr,
            "train/tokens": total["tokens"],
        }
        # Only over micro-batches whose samples all carry rollout logprobs.
        if total["mismatch_tokens"] > 0:
            metrics["train/mismatch_k3_kl"] = total["mismatch_k3_kl"] / total["mismatch_tokens"]
        if self.with_kl:
            metrics["train/kl"] = total["kl"] / num_minis
        return metrics
